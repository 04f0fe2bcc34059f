"""A deployment's entrypoint runs as a script with its folder first on `sys.path`: no module
beside the flows may be named like a package they import, or it shadows that package and every
served run crashes at load (seen: `flows/prefect/ingest.py` shadowed `ingest`)."""

from __future__ import annotations

import sys
from pathlib import Path

import flows.prefect_flows


def test_no_module_beside_the_flows_shadows_a_package_they_import() -> None:
    folder = Path(flows.prefect_flows.__file__).parent
    stems = {path.stem for path in folder.glob("*.py")} - {"__init__"}
    ours = {"ingest", "store", "judging", "training", "flows"}
    imported = {name.partition(".")[0] for name in sys.modules}  # what importing the flows loaded
    assert stems, folder
    assert not stems & (ours | imported | set(sys.stdlib_module_names)), stems & (ours | imported)
