// Must NOT compile: `contnet` is not a field of memory.add's input. memsvc's
// tests run tsc on this file and expect that error.
import { createMemsvcClient } from "memsvc-client";

const memsvc = createMemsvcClient({ url: "http://127.0.0.1:8000", apiKey: "sk_memsvc_..." });
await memsvc.memory.add.mutate({ userId: "bob", contnet: "Bob likes tea" });
