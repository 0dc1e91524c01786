"""Make this checkout importable as installed, for a python where preflight is not installed.

    python shim.py DIR      # writes DIR/preflight/__init__.py; put DIR first on PYTHONPATH

The installed package maps `preflight.checks` to the checkout's `checks/` (pyproject's
package-dir); a bare PYTHONPATH cannot. The shim package loads the checkout's own
`preflight/__init__.py` with a `__path__` of the checkout's `preflight/` and the checkout
itself, so `preflight.checks` is `checks/`.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TEXT = '''"""A shim written by benchmarks/device_check/shim.py: this checkout's preflight, importable
with preflight.checks = {root}/checks, as the installed package has it."""
import os as _os

_root = {root!r}
__path__ = [_os.path.join(_root, "preflight"), _root]
__file__ = _os.path.join(_root, "preflight", "__init__.py")
with open(__file__, encoding="utf-8") as _fh:
    exec(compile(_fh.read(), __file__, "exec"))
'''


def main() -> int:
    folder = Path(sys.argv[1]) / "preflight"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(TEXT.format(root=str(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
