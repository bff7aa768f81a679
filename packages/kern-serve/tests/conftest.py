"""kern-serve tests: the server as a subprocess on 127.0.0.1 over issue 20's fake engine
(``kern_serve.adapter:open_fake``, or the scripted variant in ``kserve_scripted.py``) and the
SmolLM2 tokenizer of the bundled GGUF, driven by the real ``openai`` client.

The servers with special options (:data:`VARIANTS`) are all started together on first use,
so that their start-ups overlap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kserve_helpers import FAKE, SCRIPTED, Reference, Server, tokenizer  # noqa: E402

#: name -> (command-line options, engine options)
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    # a KV pool of 17 pages (4 requests of 4 pages at a time), behind an API key
    "small_pool": (["--capacity", "272", "--api-key", "sk-test", "--served-model-name",
                    "kern-test"], {"step_delay": "0.001"}),
    # loading ends when the test creates the gate file; one sequence at a time and no queue
    "loading": (["--max-seqs", "1", "--max-queue", "0"],
                {"load_gate": "{gate}", "step_delay": "0.02"}),
    "kill": ([], {"step_delay": "0.005"}),
    "sigterm": ([], {"step_delay": "0.005"}),
}


@pytest.fixture(scope="session")
def tok():
    return tokenizer()


@pytest.fixture(scope="session")
def ref():
    return Reference()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The shared server: scripted fake engine, default options."""
    s = Server(tmp_path_factory.mktemp("serve"), factory=SCRIPTED)
    yield s
    s.close()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    gate = d / "loading-gate"
    servers = {name: Server(d, *args, factory=FAKE, wait=False,
                            options={k: v.format(gate=gate) for k, v in opts.items()})
               for name, (args, opts) in VARIANTS.items()}
    servers["loading"].gate = gate
    yield servers
    for s in servers.values():
        s.close()


def variant(name: str, ready: bool = True):
    @pytest.fixture(scope="session")
    def fixture(fleet):
        s = fleet[name]
        if ready:
            s.wait_ready()
        return s
    return fixture


@pytest.fixture(scope="session")
def client(server):
    import openai
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    yield c
    c.close()


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id


small_pool_server = variant("small_pool")
loading_server = variant("loading", ready=False)
kill_server = variant("kill")
sigterm_server = variant("sigterm")
