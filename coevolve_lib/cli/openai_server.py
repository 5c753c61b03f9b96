"""A small OpenAI-compatible HTTP server for any `ChatModel`, on loopback only (stdlib `http.server`).

Serves `POST /v1/chat/completions` (no streaming, n=1) and `GET /v1/models`. When the model's text holds
`<tool_call>{json}</tool_call>` blocks that all parse, they come back as structured `tool_calls` (as vLLM's
Hermes/Qwen parser does); otherwise the text is returned as is.

For tests it can inject faults (HTTP 500, a reply slower than the client's timeout, a malformed JSON body), reply
with a scripted text instead of the model's, and (`--strict`) refuse, as OpenAI's API does, a conversation whose
tool messages do not answer the calls of the assistant turn before them.

    python -m coevolve_lib.cli.openai_server --model tiny --port 8000
    python -m coevolve_lib.cli.openai_server --model tiny --port 8000 --faults 500,timeout,malformed
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.text_blocks import iter_blocks, without_blocks

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
FAULT_KINDS = ("500", "timeout", "malformed", "bad_usage")
# Blocks are found by `core.text_blocks`: as one regex, `<tool_call>\s*(.*?)\s*</tool_call>` retried every split of
# the blanks around an unclosed body (cubic: over 120 s on 8k characters).
_TOOL_CALL_OPEN, _TOOL_CALL_CLOSE = re.compile("<tool_call>"), re.compile("</tool_call>")


@dataclass
class FaultConfig:
    """Faults the server injects into chat-completion requests (for client tests)."""

    faults: list[str] = field(default_factory=list)
    """One fault per request, in arrival order ("500", "timeout", "malformed": a cut JSON body, or "bad_usage": a
    whole reply whose `usage` is a string); later requests are served."""
    always: str | None = None
    """A fault applied to every request once `faults` is used up (to exhaust a client's retry budget)."""
    delay_s: float = 3.0
    """How long a "timeout" request sleeps before it answers (set it above the client's timeout)."""
    scripted_reply: str | None = None
    """Reply with this text instead of generating (e.g. a scripted <tool_call> to test parsing)."""


def tool_message_problem(messages: list) -> str | None:
    """What OpenAI's API refuses in a conversation's tool messages (None: nothing): a `tool` message whose
    `tool_call_id` is not a call of the assistant turn before it, and an assistant call no tool message answers."""
    pending: set = set()
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return (f"messages[{index}]: tool message with tool_call_id {message.get('tool_call_id')!r} answers "
                        "no tool call of the preceding assistant message")
            pending.discard(message["tool_call_id"])
            continue
        if pending:
            return f"messages[{index}]: tool call(s) {sorted(pending)} of an assistant message have no tool message"
        if role == "assistant":
            pending = {call.get("id") for call in message.get("tool_calls") or [] if isinstance(call, dict)}
    return None


def parse_tool_calls(text: str) -> tuple[str | None, list[dict]]:
    """Split `text` into (content, tool calls). Calls are returned only if every <tool_call> block is a JSON object
    with a "name"; a malformed block leaves the whole text as content and no calls (the caller sees what came out)."""
    blocks = list(iter_blocks(text, _TOOL_CALL_OPEN, _TOOL_CALL_CLOSE))
    calls = []
    for start, end in blocks:
        try:
            call = json.loads(text[start.end():end.start()].strip())
        except (ValueError, RecursionError):  # JSONDecodeError, an int over Python's digit limit, too-deep nesting
            return text, []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return text, []
        calls.append(call)
    if not calls:
        return text, []
    content = without_blocks(text, blocks).strip()
    return content or None, calls


class ChatServer:
    """Serve one ChatModel over HTTP in a background thread: `with ChatServer(model) as server: server.base_url`."""

    def __init__(self, model: ChatModel, host: str = "127.0.0.1", port: int = 0, faults: FaultConfig | None = None,
                 served_name: str | None = None, strict: bool = False):
        """strict: answer 400 to a conversation whose tool messages do not match its calls (`tool_message_problem`),
        as OpenAI's API does."""
        if host not in LOOPBACK_HOSTS:
            raise ValueError(f"the test server binds to loopback only ({', '.join(LOOPBACK_HOSTS)}), not {host!r}")
        self.model, self.strict = model, strict
        self.served_name = served_name or model.name
        self.faults = faults or FaultConfig()
        for kind in [*self.faults.faults, self.faults.always]:
            if kind is not None and kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault {kind!r}; choose from {FAULT_KINDS}")
        self.num_requests = 0
        """Chat-completion requests received (including the faulted ones)."""
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()  # one generate at a time: HF models are not meant for concurrent calls
        self.httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        self._thread: threading.Thread | None = None
        self.closed = threading.Event()
        """Set by `close`: a request still sleeping out a "timeout" fault then answers without generating (its client
        left; the model may be generating for the next test's caller in the same process)."""

    def start(self) -> "ChatServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def close(self):
        self.closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def _next_fault(self) -> str | None:
        with self._lock:
            index = self.num_requests
            self.num_requests += 1
        return self.faults.faults[index] if index < len(self.faults.faults) else self.faults.always

    def complete(self, request: dict) -> dict:
        """The chat.completion response object for one request body."""
        config = GenerationConfig(
            max_new_tokens=request.get("max_completion_tokens") or request.get("max_tokens") or 512,
            # OpenAI's defaults when a field is absent or null: temperature 1, top_p 1.
            temperature=1.0 if request.get("temperature") is None else request["temperature"],
            top_p=1.0 if request.get("top_p") is None else request["top_p"], seed=request.get("seed"),
        )
        tools = request.get("tools")
        if self.faults.scripted_reply is not None:
            text, prompt_tokens, completion_tokens, finish = self.faults.scripted_reply, 0, 0, "stop"
        else:
            with self._model_lock:
                generation = self.model.generate([request["messages"]], [tools] if tools else None, config)[0]
            if generation.error:
                raise RuntimeError(generation.error)
            text, finish = generation.text, generation.finish_reason
            prompt_tokens, completion_tokens = generation.prompt_tokens, generation.completion_tokens
        content, calls = parse_tool_calls(text) if tools or self.faults.scripted_reply else (text, [])
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                for c in calls
            ]
            finish = "tool_calls" if finish == "stop" else finish
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.served_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, body: bytes | dict):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout fault)
                    pass

            def _error(self, status: int, message: str):
                self._send(status, {"error": {"message": message, "type": "server_error", "code": status}})

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [
                        {"id": server.served_name, "object": "model", "created": 0, "owned_by": "coevolve"}]})
                else:
                    self._error(404, f"no route {self.path}")

            def do_POST(self):
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._error(404, f"no route {self.path}")
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fault = server._next_fault()
                if fault == "500":
                    return self._error(500, "injected fault: internal server error")
                if fault == "malformed":
                    return self._send(200, b'{"id": "chatcmpl-broken", "choices": [')
                if fault == "bad_usage":
                    return self._send(200, json.dumps({
                        "id": "chatcmpl-bad-usage", "object": "chat.completion", "created": 0, "model": "x",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "hi"}}],
                        "usage": "abc"}).encode())
                if fault == "timeout" and server.closed.wait(server.faults.delay_s):
                    return self._error(503, "the server closed while the request waited")
                try:
                    request = json.loads(body)
                except json.JSONDecodeError as e:
                    return self._error(400, f"request body is not JSON: {e}")
                if request.get("model") != server.served_name:
                    return self._error(404, f"model {request.get('model')!r} not served; this server has "
                                            f"{server.served_name!r}")
                if request.get("stream"):
                    return self._error(400, "streaming is not supported")
                problem = tool_message_problem(request.get("messages") or []) if server.strict else None
                if problem:
                    return self._error(400, f"invalid conversation: {problem}")
                try:
                    self._send(200, server.complete(request))
                except Exception as e:  # noqa: BLE001 - report to the client instead of dropping the connection
                    self._error(500, f"{e.__class__.__name__}: {e}")

        return Handler


def main(argv: list[str] | None = None):
    from coevolve_lib.core.runtime import configure_process

    configure_process()  # the offline hub and torch's threads: before the model stack loads
    from coevolve_lib.core.model_specs import load_chat_model
    from coevolve_lib.profiles import ArgumentParser

    parser = ArgumentParser("python -m coevolve_lib.cli.openai_server", __doc__)
    parser.add_argument("--model", default="tiny", help="load_chat_model spec: tiny, smollm2-135m, a local path")
    parser.add_argument("--served-name", default=None, help="model name clients must send (default: the spec)")
    parser.add_argument("--host", default="127.0.0.1", choices=LOOPBACK_HOSTS)
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--faults", default="", help=f"comma-separated per-request faults from {FAULT_KINDS}")
    parser.add_argument("--always-fault", default=None, choices=FAULT_KINDS, help="fault for every later request")
    parser.add_argument("--delay-s", type=float, default=3.0, help="sleep of a 'timeout' fault")
    parser.add_argument("--scripted-reply", default=None, help="reply with this text instead of the model's")
    parser.add_argument("--strict", action="store_true",
                        help="refuse (400) tool messages that answer no call of the assistant turn, as OpenAI does")
    args = parser.parse_args(argv)
    # Each bad value is one line and status 2 (argparse's), found before the model loads where it can be.
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be 0..65535 (got {args.port})")
    kinds = [f for f in args.faults.split(",") if f]
    unknown = [kind for kind in kinds if kind not in FAULT_KINDS]
    if unknown:
        parser.error(f"--faults: unknown fault(s) {unknown}; choose from {', '.join(FAULT_KINDS)}")
    if not (math.isfinite(args.delay_s) and args.delay_s >= 0):
        parser.error(f"--delay-s must be a finite number >= 0 (got {args.delay_s})")
    with socket.socket() as probe:  # a port in use is found before the model loads, as the server will bind
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            parser.error(f"--port {args.port}: {exc.strerror or exc}; give another port, or 0 for a free one")
    try:
        model = load_chat_model(args.model)
    except (OSError, ValueError) as exc:  # a spec that names no model
        parser.error(f"--model {args.model!r}: {(str(exc).strip() or type(exc).__name__).splitlines()[0]}")
    faults = FaultConfig(faults=kinds, always=args.always_fault, delay_s=args.delay_s,
                         scripted_reply=args.scripted_reply)
    server = ChatServer(model, args.host, args.port, faults, args.served_name or args.model, strict=args.strict)
    print(f"serving {server.served_name} at {server.base_url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


if __name__ == "__main__":
    main()
