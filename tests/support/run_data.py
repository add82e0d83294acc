"""The launcher's RunData port answered in the test's own thread by a datasets service object, for
tests that run no gRPC server (the scenarios' synchronous pump). It does what the RunData servicer
does (services/datasets/grpc_api.py); tests/integration/datasets/test_run_data_contract.py holds it and the gRPC
adapter to the same behaviour."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sluice.datasets.files import PublishError
from sluice.domain.datasets.run_access import AccessGrant, validate_run_id
from sluice.domain.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from sluice.domain.runs import OutputPartition
from sluice_services.datasets.run_credentials import RunCredentials
from sluice_services.datasets.run_outputs import RunPublisher
from sluice_services.datasets.service import DatasetsService

TEST_SECRET = b"run data test secret"
UNSERVED_ADDRESS = "127.0.0.1:9"


class LocalRunData:
    def __init__(self, service: DatasetsService, partitions_dir: Path, address: str = UNSERVED_ADDRESS) -> None:
        self.service = service
        self.credentials = RunCredentials(TEST_SECRET, service.access)
        self._publisher = RunPublisher(service, partitions_dir)
        self._address = address

    def address(self) -> str:
        return self._address

    async def open_run(self, run_id: str, grants: tuple[AccessGrant, ...], attempt: int = 0) -> str:
        access = self.service.open_access(run_id, grants, attempt)
        return self.credentials.issue(access.run_id, access.attempt)

    async def publish(self, run_id: str, result: dict[str, Any], attempt: int = 0) -> tuple[OutputPartition, ...]:
        try:
            validate_run_id(run_id)
            return self._publisher.publish(run_id, result, attempt)
        except (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition) as refused:
            raise PublishError(str(refused)) from refused

    async def release(self, run_id: str, consumed: Any, reason: str,
                      attempt: int = 0) -> tuple[OutputPartition, ...] | None:
        validate_run_id(run_id)
        return self._publisher.release(run_id, consumed, reason, attempt)
