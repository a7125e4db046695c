"""Apply, read, list, watch and delete a resource with the asyncio client.

    CONVERGE_ADDR=127.0.0.1:50051 python examples/client_example.py

Needs a running converge server that has the conformance kinds applied (the
example applies them itself from conformance/kinds).
"""

import asyncio
import json
import os
import pathlib
import uuid

from converge_sdk import AsyncConvergeClient, ConvergeError
from converge_sdk.gen.converge.v1 import resource_pb2

KINDS = pathlib.Path(__file__).resolve().parents[3] / "conformance" / "kinds"


async def main() -> None:
    name = f"example-{uuid.uuid4().hex[:8]}"
    async with AsyncConvergeClient(os.environ.get("CONVERGE_ADDR", "127.0.0.1:50051")) as client:
        await client.apply_kind_manifest(json.loads((KINDS / "leaf.json").read_text())["manifest"])

        applied = await client.apply_resource("conf-leaf", name, {"value": "hello"}, labels={"app": "example"})
        print("created:", applied.created, "generation:", applied.resource.generation)

        resource = await client.get_resource("conf-leaf", name)
        print("phase:", resource_pb2.Phase.Name(resource.phase))

        async for r in client.list_resources(kind="conf-leaf", label_selector="app=example", page_size=50):
            print("listed:", r.name)

        # The snapshot first (ADDED ... then a BOOKMARK), then live changes.
        async with client.watch_resources(kind="conf-leaf", label_selector="app=example") as watch:
            async for event in watch:
                print("watch:", resource_pb2.WatchEventType.Name(event.type), event.resource.name)
                if event.initial_events_end:
                    break
            print("resume later from resource_version", watch.resource_version)

        try:
            await client.apply_resource("conf-leaf", name, {"sleepMs": "not a number"})
        except ConvergeError as err:
            print("refused:", err.code.name, err.reason, [(v.field, v.description) for v in err.field_violations])

        deleted = await client.delete_resource("conf-leaf", name)
        print("deleting:", deleted is not None and resource_pb2.Phase.Name(deleted.phase))


if __name__ == "__main__":
    asyncio.run(main())
