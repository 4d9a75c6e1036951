// An agent's host, on the official MCP TypeScript SDK, using heddle as its shell tool.
//
//   npm install && node agent.mjs [HEDDLE_BIN] [PROJECT_DIR]
//
// It starts `heddle mcp` as its MCP server command (as Claude Code, Codex or any MCP host would), lists
// the tools, runs a command, carries `cd` into the next call, yields a slow job and sees it announced,
// and prints a JSON summary. tests/tests/mcp.rs runs it in CI; it exits non-zero if a step fails.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CreateTaskResultSchema } from "@modelcontextprotocol/sdk/types.js";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";

const heddle = process.argv[2] ?? "heddle";
const project = process.argv[3] ?? process.cwd();

const transport = new StdioClientTransport({
  command: heddle,
  args: ["mcp", "--cwd", project, "--close-on-exit"],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "heddle-ts-example", version: "1.0.0" });
await client.connect(transport);

const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");

const { tools } = await client.listTools();
const names = tools.map((t) => t.name).sort();
assert.deepEqual(names, ["check", "checks", "describe", "jobs", "keep", "kill", "output", "resize", "run", "wait", "write"]);

let r = await client.callTool({ name: "run", arguments: { cmd: "mkdir -p ts && cd ts && echo hello from $PWD" } });
assert.equal(r.isError, false, text(r));
assert.match(text(r), /^exit 0 · .* · job 1\nhello from .*\/ts\n/);

r = await client.callTool({ name: "run", arguments: { cmd: "basename $PWD" } });
assert.equal(text(r).split("\n")[1], "ts", text(r));

r = await client.callTool({ name: "run", arguments: { cmd: "sleep 1; echo done sleeping", yield_ms: 100 } });
assert.match(text(r), /^still running after/, text(r));
const slow = r.structuredContent.job;
await sleep(1500);
r = await client.callTool({ name: "jobs", arguments: {} });
assert.match(text(r), new RegExp(`job ${slow} ended: exit 0 .*\\n  done sleeping\\n`), text(r));

// A long run as an MCP task: created at once, polled, and its result is the job's final result.
const seen = [];
for await (const m of client.experimental.tasks.callToolStream(
  { name: "run", arguments: { cmd: "sleep 1; echo task done" } },
  undefined,
  { task: { ttl: 60000 } },
)) {
  seen.push(m);
}
const created = seen.find((m) => m.type === "taskCreated");
assert.ok(created, JSON.stringify(seen));
assert.equal(created.task.status, "working", JSON.stringify(created));
assert.ok(seen.some((m) => m.type === "taskStatus" && m.task.status === "working"), JSON.stringify(seen));
const final = seen.find((m) => m.type === "result");
assert.ok(final, JSON.stringify(seen));
assert.match(text(final.result), /^exit 0 · .*\ntask done\n/, text(final.result));
const taskId = created.task.taskId;
assert.equal((await client.experimental.tasks.getTask(taskId)).status, "completed");
assert.ok((await client.experimental.tasks.listTasks()).tasks.some((t) => t.taskId === taskId));

// Cancelling a task stops its job (cancelling a mere request never does).
const doomed = await client.request(
  { method: "tools/call", params: { name: "run", arguments: { cmd: "sleep 300" }, task: { ttl: 60000 } } },
  CreateTaskResultSchema,
);
const cancelled = await client.experimental.tasks.cancelTask(doomed.task.taskId);
assert.equal(cancelled.status, "cancelled", JSON.stringify(cancelled));
assert.match(cancelled.statusMessage, /killed/, cancelled.statusMessage);
const doomedJob = Number(doomed.task.taskId.split("/").pop());
r = await client.callTool({ name: "wait", arguments: { job: doomedJob } });
assert.equal(r.structuredContent.state, "killed", text(r));

await client.close();
console.log(JSON.stringify({ tools: names, announced: slow, task: taskId, cancelled: doomed.task.taskId }));
