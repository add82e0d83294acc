"""`sluice serve NAME --config FILE` takes its options from the file; a bad file is one line, exit 2."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sluice.client import SluiceClient

pytestmark = pytest.mark.integration


def server_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}


def test_serve_takes_port_and_data_dir_from_the_config_file(tmp_path):
    config = tmp_path / "etc" / "sluice.toml"
    config.parent.mkdir()
    config.write_text('[sluice]\ndata_dir = "../from-file"\nport = 1\n\n[services.registry]\nport = 0\nmetrics_port = 0\n')
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "sluice_services.cli", "serve", "registry", "--config", str(config)],
                               stdout=subprocess.PIPE, text=True, cwd=elsewhere, env=server_env())
    try:
        line = process.stdout.readline()
        assert line.startswith("sluice registry ready on 127.0.0.1:"), line
        assert " metrics on 127.0.0.1:" in line
        assert line.rstrip().endswith(f"(data in {config.parent / '../from-file'})")
        with SluiceClient(line.split(" ready on ")[1].split()[0]) as client:
            assert client.list_schedules() == []
        assert (tmp_path / "from-file" / "events.db").is_file()
        assert not (elsewhere / ".sluice").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        process.stdout.close()


def test_a_bad_config_file_is_one_line_naming_the_key_and_exit_2(tmp_path):
    config = tmp_path / "sluice.toml"
    config.write_text("[services.registry]\nprot = 0\n")
    result = subprocess.run([sys.executable, "-m", "sluice_services.cli", "serve", "registry", "--config", str(config)],
                            capture_output=True, text=True, timeout=60, env=server_env())
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"sluice: error: {config}: services.registry.prot: unknown key (known: data_dir, host, port, ")
    assert result.stdout == ""
