"""`sluice apps get|list|delete|pause|resume` (`apps deploy` is in sluice.cli.work). An app is named by
--namespace and --app; pause and resume without --app act on the whole namespace."""
from __future__ import annotations

import json

from sluice.cli import render
from sluice.cli.output import UsageError, print_many, print_message
from sluice.client import SluiceClient
from sluice.v1 import schedules_pb2


def register(apps) -> None:
    """The actions, on the `apps` command's subparsers."""
    get = apps.add_parser("get", help="one app: programs, schedules, paused (JSON)")
    _scope(get, app_required=True)
    get.set_defaults(handler=_get)
    listing = apps.add_parser("list", help="every app: schedules, enabled, paused, deployed")
    listing.add_argument("--namespace", default="", help="only this namespace's")
    listing.set_defaults(handler=_list)
    delete = apps.add_parser("delete", help="delete an app and all its schedules",
                             description="Refused while any of its schedules is enabled and not paused: pause the "
                                         "app (apps pause) or disable them first.")
    _scope(delete, app_required=True)
    delete.set_defaults(handler=_delete)
    for action, rpc, text in (
            ("pause", "PauseApp", "pause an app, or every app of a namespace: its schedules fire nothing and their "
                                  "pending jobs are discarded, also schedules created while it is paused"),
            ("resume", "ResumeApp", "resume a paused app or namespace: each schedule goes back to its own "
                                    "enabled or disabled")):
        sub = apps.add_parser(action, help=text, description=text + ". Idempotent.")
        _scope(sub, app_required=False)
        sub.set_defaults(handler=_pause_or_resume(action, rpc))


def _scope(parser, app_required: bool) -> None:
    parser.add_argument("--namespace", default="", help="required")
    parser.add_argument("--app", default="", help="required" if app_required else "only this app (default: the "
                                                                                   "whole namespace)")
    parser.set_defaults(app_required=app_required)


def _require_scope(args) -> None:
    if not args.namespace:
        raise UsageError("--namespace is required")
    if args.app_required and not args.app:
        raise UsageError("--app is required")


def _get(client: SluiceClient, args) -> int:
    _require_scope(args)
    app = client.schedules.GetApp(schedules_pb2.GetAppRequest(namespace=args.namespace, app=args.app), timeout=10)
    return print_message(args, app)


def list_apps(client: SluiceClient, namespace: str = "") -> list[schedules_pb2.App]:
    """Every app, page after page (ListApps is paged)."""
    found: list[schedules_pb2.App] = []
    token = ""
    while True:
        answer = client.schedules.ListApps(schedules_pb2.ListAppsRequest(namespace=namespace, page_token=token),
                                           timeout=10)
        found.extend(answer.apps)
        token = answer.next_page_token
        if not token:
            return found


def _list(client: SluiceClient, args) -> int:
    found = list_apps(client, args.namespace)
    rows = [(f"{a.namespace}.{a.app}", a.schedules, a.enabled_schedules, _paused_text(a),
             "yes" if a.deployed else "no", ", ".join(p.name for p in a.programs) or "-") for a in found]
    return print_many(args, found, render.table(("APP", "SCHEDULES", "ENABLED", "PAUSED", "DEPLOYED", "PROGRAMS"),
                                                rows))


def _paused_text(app: schedules_pb2.App) -> str:
    if app.paused:
        return "yes"
    return "namespace" if app.namespace_paused else "no"


def _delete(client: SluiceClient, args) -> int:
    _require_scope(args)
    response = client.schedules.DeleteApp(schedules_pb2.DeleteAppRequest(namespace=args.namespace, app=args.app),
                                          timeout=30)
    if args.json:
        return print_message(args, response)
    names = f": {', '.join(response.deleted)}" if response.deleted else ""
    print(f"deleted app {args.namespace}.{args.app} and {len(response.deleted)} schedule(s){names}")
    return 0


def _pause_or_resume(action: str, rpc: str):
    def handler(client: SluiceClient, args) -> int:
        _require_scope(args)
        request = schedules_pb2.PauseAppRequest(namespace=args.namespace, app=args.app)
        response = getattr(client.schedules, rpc)(request, timeout=30)
        scope = f"{args.namespace}.{args.app}" if args.app else f"namespace {args.namespace}"
        if args.json:
            print(json.dumps({"scope": scope, "changed": response.changed, "schedules": response.schedules}))
        elif response.changed:
            print(f"{action}d {scope}: {response.schedules} schedule(s) {action}d")
        else:
            print(f"{scope} was already paused" if action == "pause" else f"{scope} was not paused")
        return 0
    return handler
