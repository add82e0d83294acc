"""A throwaway PostgreSQL server for tests and development: `with PostgresServer() as pg: pg.dsn`.

It runs the server binaries of the newest PostgreSQL under /usr/lib/postgresql/<major>/bin (or
$SLUICE_POSTGRES_BIN): `initdb` into a fresh temporary directory, `postgres` listening on
127.0.0.1 at a free port (trust authentication, fsync off: a test server, never a real one),
its unix socket in that directory. Leaving the block stops the server by its pid (fast
shutdown) and deletes the directory. As root it runs them as the `postgres` system user
(initdb refuses root), which Debian's package creates. Install the binaries with `make postgres`.
"""
from __future__ import annotations

import ctypes
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType

import psycopg

INSTALL_HINT = "install them with `make postgres` (runs deploy/postgres/install.sh: apt-get install postgresql)"


class PostgresNotInstalled(RuntimeError):
    """The server binaries (or, as root, the `postgres` user to run them) are missing."""


class PostgresServer:
    def __init__(self, *, database: str = "sluice", bin_dir: str | os.PathLike[str] | None = None,
                 start_timeout: float = 30.0) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir else find_bin_dir()
        self.database = database
        self.start_timeout = start_timeout
        self.port = 0
        self.dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._user = _run_as_user()

    @property
    def dsn(self) -> str:
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database} connect_timeout=5"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database on this server; returns its dsn (tests take one each)."""
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r}: lowercase letters, digits and _ only")
        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")  # FILE_COPY: fastest with fsync off
        return self.dsn_for(name)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> PostgresServer:
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        try:
            if self._user:
                os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
            self._run(self.bin_dir / "initdb", "-D", "data", "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--no-locale", "--no-sync", "--no-instructions")
            for attempt in range(3):  # the free port may be taken between finding and binding it
                if self._launch():
                    break
            else:
                raise RuntimeError(f"PostgreSQL did not start; its log:\n{self._log()}")
            self.create_database(self.database)
            return self
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Fast shutdown by pid (SIGINT), escalating if it hangs; then remove the directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
                process.send_signal(sig)
                try:
                    process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        directory, self.dir = self.dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def halt(self) -> None:
        """Stop the server process (fast shutdown: connections are closed) and keep its data and port, for
        `resume`: an outage of the database as clients see it."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(30.0)

    def resume(self) -> None:
        """Start the server `halt` stopped, on the same port with the same data."""
        if self._process is not None:
            return
        if not self._launch(self.port):
            raise RuntimeError(f"PostgreSQL did not start again on port {self.port}; its log:\n{self._log()}")

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- plumbing ----------------------------------------------------------------------------

    def _launch(self, port: int | None = None) -> bool:
        """Start postgres on `port` (default a free one); True once it accepts connections, False if it exited."""
        assert self.dir is not None
        self.port = port or _free_port()
        log = open(self.dir / "postgres.log", "ab")
        with log:
            self._process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", "data", "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "max_connections=200"],
                cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=_server_env(), preexec_fn=_die_with_parent, **self._user_kwargs(),
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                return False
            try:
                psycopg.connect(self.dsn_for("postgres"), connect_timeout=1).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"PostgreSQL did not accept connections within {self.start_timeout}s")

    def _run(self, *command: str | os.PathLike[str]) -> None:
        result = subprocess.run([str(part) for part in command], cwd=self.dir, env=_server_env(),
                                stdin=subprocess.DEVNULL, capture_output=True, **self._user_kwargs())
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace")
            raise RuntimeError(f"{Path(command[0]).name} failed ({result.returncode}):\n{output}")

    def _user_kwargs(self) -> dict[str, object]:
        if not self._user:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _log(self) -> str:
        try:
            return (self.dir / "postgres.log").read_text(errors="replace") if self.dir else ""
        except OSError:
            return ""


def find_bin_dir() -> Path:
    """$SLUICE_POSTGRES_BIN, else the newest /usr/lib/postgresql/<major>/bin with a server in it."""
    override = os.environ.get("SLUICE_POSTGRES_BIN")
    candidates = [override] if override else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: _major(path), reverse=True)
    for candidate in candidates:
        if all(os.access(os.path.join(candidate, name), os.X_OK) for name in ("initdb", "postgres")):
            return Path(candidate)
    where = f"SLUICE_POSTGRES_BIN={override}" if override else "/usr/lib/postgresql/*/bin"
    raise PostgresNotInstalled(f"no PostgreSQL server binaries (initdb, postgres) in {where}; {INSTALL_HINT}")


def _major(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", Path(path).parent.name)) or (0,)


def _run_as_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresNotInstalled(
            "running as root, and initdb refuses root, but there is no `postgres` user to run the server as; "
            f"{INSTALL_HINT} (the package creates the user), or `useradd --system postgres`"
        ) from None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_env() -> dict[str, str]:
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "TZ")}
    return {**keep, "LC_ALL": "C", "LANG": "C"}


def _die_with_parent() -> None:
    """In the child before exec: if this (test) process dies without stopping us, shut down fast."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
