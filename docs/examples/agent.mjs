// An agent loop in plain JavaScript (Node 18+ or a browser: only `fetch`) over `compaction serve`.
//
//   compaction serve --store sqlite:///./sessions.db &
//   COMPACTION_URL=http://127.0.0.1:8080 node docs/examples/agent.mjs
//
// Each turn: the user's prompt is appended, the session is compacted if it must be before the
// model is called, the surface is fetched in the OpenAI chat shape (ready to send), the model's
// answer and the tool results are appended. Every write sends the ETag it was given as If-Match
// and an Idempotency-Key, so a retry after a lost answer is never stored twice. The model here is
// a scripted stand-in (one tool call, then an answer); put your provider's client in `callModel`.
// Environment: COMPACTION_URL (default http://127.0.0.1:8080), COMPACTION_TOKEN (the bearer token,
// when the service has one), TURNS (default 50), WINDOW (the model's context window, default 16000).

const base = process.env.COMPACTION_URL ?? "http://127.0.0.1:8080";
const token = process.env.COMPACTION_TOKEN;
const turns = Number(process.env.TURNS ?? 50);
const window = Number(process.env.WINDOW ?? 16000);

async function call(method, path, body, headers = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      const response = await fetch(base + path, {
        method,
        headers: {
          "Content-Type": "application/json",
          ...(token ? { Authorization: `Bearer ${token}` } : {}),
          ...headers,
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const data = await response.json();
      if (!response.ok) {
        // {"error": {"type": "ConcurrencyError", "message": ..., "status": 409}}
        throw Object.assign(new Error(`${data.error.type}: ${data.error.message}`), { status: response.status });
      }
      return { data, etag: response.headers.get("ETag") };
    } catch (error) {
      // the service did not answer (restarting, network): retry the same request, same headers
      if (error.status !== undefined || attempt === 5) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
    }
  }
}

// A stand-in for the model: a tool call first, then an answer once the tool has run.
function callModel(messages, turn) {
  const last = messages[messages.length - 1];
  if (last.role === "tool") return { role: "assistant", content: `Turn ${turn}: fixed src/app_${turn}.js.` };
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id: `call_${turn}`, type: "function",
                   function: { name: "bash", arguments: JSON.stringify({ command: `npm test -- app_${turn}` }) } }],
  };
}

function runTool(toolCall, turn) {
  const lines = Array.from({ length: 40 }, (_, n) => `src/app_${turn}.js:${n}: expect(handler_${n}()).toBe(${n})`);
  return [`FAIL src/app_${turn}.js: TypeError at line ${turn}`, ...lines].join("\n");
}

const created = await call("POST", "/v1/sessions", {
  provider: "openai", model: "gpt-4o", window, system: "You are a coding agent.",
  tools: [{ name: "bash", description: "run a shell command" }],
});
const session = created.data.id;
let etag = created.etag;
let compactions = 0;

async function append(items, key) {
  const { data, etag: next } = await call("POST", `/v1/sessions/${session}/items`,
    { format: "openai", items }, { "If-Match": etag, "Idempotency-Key": key });
  etag = next;
  return data;
}

for (let turn = 0; turn < turns; turn++) {
  await append([{ role: "user", content: `Turn ${turn}: the test of src/app_${turn}.js fails; fix it.` }], `t${turn}-user`);
  for (let step = 0; ; step++) {
    const compacted = await call("POST", `/v1/sessions/${session}/compact`, { mode: "if_needed" }, { "If-Match": etag });
    compactions += compacted.data.compactions.length;
    etag = compacted.etag;
    const { data: surface } = await call("GET", `/v1/sessions/${session}/surface?format=openai`);
    const reply = callModel(surface.messages, turn); // send surface.messages to your model here
    const items = [reply];
    for (const toolCall of reply.tool_calls ?? []) {
      items.push({ role: "tool", tool_call_id: toolCall.id, content: runTool(toolCall, turn) });
    }
    await append(items, `t${turn}-s${step}`);
    if (!reply.tool_calls) break;
  }
}

const { data: surface } = await call("GET", `/v1/sessions/${session}/surface?format=openai`);
const { data: audit } = await call("GET", `/v1/sessions/${session}/audit`);
console.log(JSON.stringify({
  session, version: Number(etag.replaceAll('"', "")), compactions, tokens: surface.tokens, window,
  audit_passed: audit.passed, messages: surface.messages,
}));
