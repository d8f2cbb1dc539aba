"""model_paths.py — where the tests' models are, for the Python tests.

deploy/fetch-model.sh is the one place that knows the models' file names and their folder
(${INFERD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/inferd/models}); this asks it
(`fetch-model.sh --path NAME`). $INFERD_TEST_MODEL, when set, replaces the default model.
The shell tests ask fetch-model.sh the same way.
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_path(name: str = "smollm2") -> str:
    """The path of model `name` (a fetch-model.sh name), present or not."""
    if name == "smollm2" and os.environ.get("INFERD_TEST_MODEL"):
        return os.environ["INFERD_TEST_MODEL"]
    out = subprocess.run(["bash", os.path.join(ROOT, "deploy", "fetch-model.sh"), "--path", name],
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip()
