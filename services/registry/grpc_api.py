"""gRPC edge of the schedule-registry: ScheduleRegistry, and Notifications for producers."""
from __future__ import annotations


from sluice.bus.port import Producer
from sluice.bus.topics import PARTITION_NOTIFICATIONS, PROGRAM_NOTIFICATIONS
from sluice.domain.common import PartitionCommitted, ProgramStatusChanged
from sluice.domain.apps import AppDeleted, DeleteApp, DeployApp, PauseApp, ProgramSpec, ResumeApp
from sluice.domain.names import validate_name
from sluice.domain.schedules import (ScheduleCreated, ScheduleDeleted, SchedulePaused, ScheduleResumed, ScheduleUpdated,
                                     schedule_id_for)
from sluice.paging import after_key, fill_page, next_page_token, paging
from sluice.domain.bounds import MAX_NOTIFICATION_BYTES, check_size
from sluice.domain.errors import InvalidArgument
from sluice.runtime.grpc_server import GrpcBinding, grpc_errors
from sluice.v1 import notifications_pb2, notifications_pb2_grpc, schedules_pb2, schedules_pb2_grpc
from sluice.wire.common import notification_from_proto, program_from_proto
from sluice.wire.schedules import schedule_from_proto, schedule_to_proto
from sluice_services.registry.service import AppView, RegistryService


class ScheduleRegistryServicer(schedules_pb2_grpc.ScheduleRegistryServicer):
    def __init__(self, registry: RegistryService) -> None:
        self._registry = registry

    @grpc_errors
    async def DeployApp(self, request, context):
        programs = tuple(ProgramSpec(p.name, p.entry_point, p.description) for p in request.programs)
        deployed = [schedule_from_proto(s, schedule_id_for(program_from_proto(s.program), s.name), f"app.schedules[{i}]")
                    for i, s in enumerate(request.schedules)]
        update = request.update_schedules if request.HasField("update_schedules") else True
        plan = self._registry.deploy(DeployApp(request.namespace, request.app, programs, tuple(deployed), update,
                                                   prune=request.prune))
        response = schedules_pb2.DeployAppResponse()
        for events in plan.values():
            for event in events:
                match event:
                    case ScheduleCreated(schedule):
                        response.created.append(schedule.name)
                    case ScheduleUpdated(schedule):
                        response.updated.append(schedule.name)
                    case ScheduleDeleted(schedule_id):
                        response.deleted.append(self._registry.name_of(schedule_id))
        return response

    @grpc_errors
    async def CreateSchedule(self, request, context):
        proto = request.schedule
        schedule_id = schedule_id_for(program_from_proto(proto.program), proto.name)
        return schedule_to_proto(self._registry.create(schedule_from_proto(proto, schedule_id)))

    @grpc_errors
    async def UpdateSchedule(self, request, context):
        proto = request.schedule
        schedule_id = proto.id or schedule_id_for(program_from_proto(proto.program), proto.name)
        return schedule_to_proto(self._registry.update(schedule_from_proto(proto, schedule_id)))

    @grpc_errors
    async def GetSchedule(self, request, context):
        return schedule_to_proto(self._registry.get(_require_id(request.id)))

    @grpc_errors
    async def ListSchedules(self, request, context):
        """Paged like Jobs.ListJobs: by (namespace, app, name), a page of page_size (and under 2 MiB)."""
        size, after = paging(request, LIST_SCHEDULES, _is_schedule_key)
        found = self._registry.list(request.namespace, request.app)
        page, last = fill_page(after_key(found, _schedule_key, after), size, schedule_to_proto)
        return schedules_pb2.ListSchedulesResponse(schedules=page, next_page_token=next_page_token(LIST_SCHEDULES,
                                                                                                   last))

    @grpc_errors
    async def DeleteSchedule(self, request, context):
        self._registry.delete(_require_id(request.id))
        return schedules_pb2.DeleteScheduleResponse()

    @grpc_errors
    async def EnableSchedule(self, request, context):
        return schedule_to_proto(self._registry.enable(_require_id(request.id)))

    @grpc_errors
    async def DisableSchedule(self, request, context):
        return schedule_to_proto(self._registry.disable(_require_id(request.id)))

    @grpc_errors
    async def GetApp(self, request, context):
        validate_name("namespace", request.namespace)
        validate_name("app", request.app)
        return _app_to_proto(self._registry.app_view(request.namespace, request.app))

    @grpc_errors
    async def ListApps(self, request, context):
        """Paged like ListSchedules: by (namespace, app)."""
        if request.namespace:
            validate_name("namespace", request.namespace)
        size, after = paging(request, LIST_APPS, _is_app_key)
        found = self._registry.app_views(request.namespace)
        page, last = fill_page(after_key(found, _app_key, after), size, _app_to_proto)
        return schedules_pb2.ListAppsResponse(apps=page, next_page_token=next_page_token(LIST_APPS, last))

    @grpc_errors
    async def DeleteApp(self, request, context):
        plan = self._registry.delete_app(DeleteApp(request.namespace, request.app))
        deleted = [event for events in plan.values() for event in events if isinstance(event, AppDeleted)]
        return schedules_pb2.DeleteAppResponse(deleted=deleted[0].schedule_names)

    @grpc_errors
    async def PauseApp(self, request, context):
        return _pause_response(self._registry.pause(PauseApp(request.namespace, request.app)), SchedulePaused)

    @grpc_errors
    async def ResumeApp(self, request, context):
        return _pause_response(self._registry.pause(ResumeApp(request.namespace, request.app)), ScheduleResumed)


def _pause_response(plan: dict[str, list], kind: type) -> schedules_pb2.PauseAppResponse:
    changed = sum(isinstance(event, kind) for events in plan.values() for event in events)
    return schedules_pb2.PauseAppResponse(changed=bool(plan), schedules=changed)


def _app_to_proto(view: AppView) -> schedules_pb2.App:
    return schedules_pb2.App(
        namespace=view.namespace, app=view.app, deployed=view.deployed, paused=view.paused,
        namespace_paused=view.namespace_paused, schedules=view.schedules, enabled_schedules=view.enabled_schedules,
        programs=[schedules_pb2.ProgramSpec(name=p.name, entry_point=p.entry_point, description=p.description)
                  for p in view.programs])


class NotificationsServicer(notifications_pb2_grpc.NotificationsServicer):
    """Validates a producer's notification and puts it on its topic; an invalid one is not published."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    @grpc_errors
    async def Publish(self, request, context):
        if not request.HasField("notification"):
            raise InvalidArgument("notification", "is required")
        notification = notification_from_proto(request.notification)
        _validate_names(notification.payload, "notification")
        # its partitions are bounded, but not its id or a program status's run, schedule and job ids
        check_size("notification", request.notification.ByteSize(), MAX_NOTIFICATION_BYTES)
        topic = PARTITION_NOTIFICATIONS if isinstance(notification.payload, PartitionCommitted) else PROGRAM_NOTIFICATIONS
        await self._producer.send(topic, request.notification.SerializeToString(), key=notification.event_key().encode())
        return notifications_pb2.PublishNotificationResponse(id=notification.id)


def _validate_names(payload: PartitionCommitted | ProgramStatusChanged, path: str) -> None:
    """A producer's names follow the identifier rule (sluice.domain.names); key values may be any text."""
    if isinstance(payload, PartitionCommitted):
        where = f"{path}.partition_committed"
        validate_name(f"{where}.namespace", payload.namespace)
        validate_name(f"{where}.dataset", payload.dataset)
        for index, partition in enumerate(payload.partitions):
            for name in partition.key:
                validate_name(f"{where}.partitions[{index}].key", name)
        return
    for name in ("namespace", "app", "program"):
        validate_name(f"{path}.program_status_changed.program.{name}", getattr(payload.program, name))


def _require_id(schedule_id: str) -> str:
    if not schedule_id:
        raise InvalidArgument("id", "must not be empty")
    return schedule_id


def bindings(registry: RegistryService, producer: Producer) -> list[GrpcBinding]:
    return [
        GrpcBinding(schedules_pb2.DESCRIPTOR.services_by_name["ScheduleRegistry"].full_name,
                    schedules_pb2_grpc.add_ScheduleRegistryServicer_to_server, ScheduleRegistryServicer(registry)),
        GrpcBinding(notifications_pb2.DESCRIPTOR.services_by_name["Notifications"].full_name,
                    notifications_pb2_grpc.add_NotificationsServicer_to_server, NotificationsServicer(producer)),
    ]


LIST_SCHEDULES = "ListSchedules"


def _schedule_key(schedule) -> tuple[str, str, str]:
    return schedule.program.namespace, schedule.program.app, schedule.name


LIST_APPS = "ListApps"


def _app_key(view: AppView) -> tuple[str, str]:
    return view.namespace, view.app


def _is_app_key(key: tuple) -> bool:
    return len(key) == 2 and all(isinstance(part, str) for part in key)


def _is_schedule_key(key: tuple) -> bool:
    return len(key) == 3 and all(isinstance(part, str) for part in key)
