"""The report layer (inverse_depth/report/) imports the science modules and is never imported
by them: a science module can be used, and tested, without matplotlib or any report."""

import ast
import glob
import os
import subprocess
import sys

from tests import REPO

SCIENCE = sorted(glob.glob(os.path.join(REPO, "inverse_depth", "*.py")))


def _imported_modules(path: str) -> set[str]:
  tree = ast.parse(open(path).read())
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
  return found


def test_no_science_module_imports_the_report_layer():
  assert len(SCIENCE) > 10
  for path in SCIENCE:
    imported = _imported_modules(path)
    assert not any(name == "inverse_depth.report" or name.startswith("inverse_depth.report.")
                   for name in imported), (path, sorted(imported))
    assert not any(name.startswith("matplotlib") for name in imported), path


def test_importing_every_science_module_loads_no_report_and_no_matplotlib():
  modules = [os.path.basename(path)[:-3] for path in SCIENCE if not path.endswith("__init__.py")]
  code = ("import sys\n" + "".join(f"import inverse_depth.{m}\n" for m in modules)
          + "print(sorted(m for m in sys.modules if m.startswith(('inverse_depth.report', "
            "'matplotlib'))))")
  out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True,
                       text=True).stdout
  assert out.strip() == "[]", out
