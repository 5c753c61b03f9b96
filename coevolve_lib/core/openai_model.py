"""`OpenAIChatModel`: a chat model behind any OpenAI-compatible endpoint (vLLM, a hosted API, or
`coevolve_lib.cli.openai_server`), with retries, backoff and a retry budget; a request that still fails gives a
`Generation` with `error` set. Also what it sends and reads: the conversation as strict endpoints take it, and every
request bounded in time and bytes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from coevolve_lib.core.config import ConfigError
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.safe_calls import MAX_SOURCE_CHARS

log = logging.getLogger(__name__)


def _retryable(exc: Exception) -> bool:
    """Timeouts, connection errors, 5xx, 408/409/429 and malformed responses are worth another try; other 4xx not."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in (408, 409, 429)
    return True


def _error_text(exc: Exception) -> str:
    """What an item's error says: the exception, and what caused it when its own text is generic (the openai client
    says "Connection error." for every transport failure)."""
    text, cause = str(exc), exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({type(cause).__name__}: {cause})"
    return f"{exc.__class__.__name__}: {text[:500]}"


SAME_SERVER_ERROR_TRIES = 3
"""Tries after which the same HTTP 5xx answer to the same request ends its retries (a server that cannot make this
reply, not an overloaded one; two in a row still happen to transient faults)."""


def _server_error(exc: Exception) -> bool:
    """An HTTP 5xx answer (a server that answered, unlike a timeout or a dropped connection)."""
    import openai

    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


CALL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""An endpoint's tool-call id the conversation keeps: short and plain (OpenAI's are `call_` and 24 characters)."""


def kept_call_ids(ids: list) -> list[str | None]:
    """An endpoint's call ids as the conversation keeps them: each that is a short plain string (`CALL_ID`) and new
    in the reply, else None, for which the request makes one (`_openai_messages`). A giant id made a
    544 MB record; one id repeated for every call was sent back on every tool message."""
    kept, seen = [], set()
    for call_id in ids:
        sane = isinstance(call_id, str) and CALL_ID.fullmatch(call_id) is not None and call_id not in seen
        kept.append(call_id if sane else None)
        if sane:
            seen.add(call_id)
    return kept


def _openai_messages(messages: list[dict]) -> list[dict]:
    """The conversation as strict endpoints take it: every assistant tool call with an id unique in the conversation
    (the endpoint's own, else, or when an earlier call had it, one made here) and string arguments, every `tool`
    message answering a call of the assistant turn before it (by its id, else the next unanswered call in order). A tool
    message that answers no call (the error for a call the kit parsed from text and refused: it never was a call) goes
    as a user message, never under an invented id."""
    out, pending, used, counter = [], [], set(), 0
    for message in messages:
        message = dict(message)
        tool_calls = message.pop("tool_calls", None)  # dropped when empty: strict endpoints reject `[]`
        if tool_calls:
            calls, pending = [], []  # the tool messages that follow answer these calls: (id kept, id sent)
            for call in tool_calls:
                function = dict(call["function"])
                if not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments", {}))
                call_id = call.get("id")
                sent = call_id if call_id and call_id not in used else None  # unique in the conversation
                while sent is None or sent in used:
                    sent, counter = f"call_{counter}", counter + 1
                used.add(sent)
                pending.append((call_id, sent))
                calls.append({"id": sent, "type": "function", "function": function})
            message["tool_calls"] = calls
        elif message.get("role") == "tool":
            answered = next((entry for entry in pending if entry[0] == message.get("tool_call_id")), None) \
                or (pending[0] if pending else None)
            if answered is not None:
                pending.remove(answered)
                message["tool_call_id"] = answered[1]
            else:
                message = {"role": "user", "content": message.get("content", "")}
        else:
            pending = []
        out.append(message)
    return out


def _parse_arguments(arguments: str):
    """JSON-decoded arguments when they are a JSON object; otherwise the raw string (the caller validates and refuses
    it). Never raises: text too long to be a call is not decoded, and a huge integer or deep nesting is not JSON."""
    if not isinstance(arguments, str) or len(arguments) > MAX_SOURCE_CHARS:
        return arguments
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):  # JSONDecodeError, an int over Python's digit limit, too-deep nesting
        return arguments
    return value if isinstance(value, dict) else arguments


class OpenAIChatModel(ChatModel):
    """A model behind an OpenAI-compatible /v1/chat/completions endpoint."""

    native_tools = True

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0,
                 max_retries: int = 4, backoff_s: float = 1.0, max_backoff_s: float = 30.0, max_workers: int = 8,
                 deadline_s: float | None = None, batch_deadline_s: float | None = None, min_interval_s: float = 0.0):
        """timeout: seconds per request. max_retries: extra attempts per item after the first fails.
        backoff_s / max_backoff_s: retry k waits min(max_backoff_s, backoff_s * 2**k) times a random jitter in [0.5, 1].
        max_workers: requests of one batch in flight at once. deadline_s: most seconds per item, its retries and
        waits included (each request's timeout shrinks to what is left); batch_deadline_s: most seconds per
        `generate` call, all its items together (an item not answered by then is an error); None: only the tries
        bound them. A batch still waiting after `WAIT_NOTICE_S` says so on stderr, with both deadlines.
        min_interval_s: fewest seconds between two requests' starts, over all threads (a rate limit's share)."""
        import openai

        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:  # the openai client would call api.openai.com: never without being told
            raise ConfigError(f"openai:{model} has no endpoint: set OPENAI_BASE_URL to its OpenAI-compatible server "
                              "(https://api.openai.com/v1 for OpenAI's own), or give base_url")
        self.name = model
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_workers = max_workers
        self.timeout, self.deadline_s, self.batch_deadline_s = timeout, deadline_s, batch_deadline_s
        # The client's own retries are off: this class retries, so every failure is counted and budgeted here.
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=timeout, max_retries=0, http_client=_bounded_http_client(),
        )
        self.num_retries = 0
        """Retries made so far over all calls (for tests and run logs)."""
        self.min_interval_s = min_interval_s
        self._next_start = 0.0  # the earliest `time.perf_counter` a request may start (`min_interval_s`)
        self.not_after = float("inf")
        """A `time.perf_counter` time no call outlasts (a round's deadline: `core.llm_calls.calls_cut_at`)."""
        self._lock = threading.Lock()

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        items = [(m, tools[j] if tools else None) for j, m in enumerate(conversations)]
        if not items:
            return []
        batch_deadline = min(time.perf_counter() + self.batch_deadline_s if self.batch_deadline_s else float("inf"),
                             self.not_after)
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(items))) as pool:
            futures = [pool.submit(self._generate_one, m, t, config, batch_deadline) for m, t in items]
            _, pending = wait(futures, timeout=WAIT_NOTICE_S)
            if pending:  # a slow or silent endpoint: say what the command waits for, and for how long at most
                log.warning("waiting for %d of %d replies from openai:%s at %s (each at most %s, the batch at most %s)",
                            len(pending), len(items), self.model, str(self.client.base_url).rstrip("/"),
                            _seconds(self.deadline_s), _seconds(self.batch_deadline_s))
            return [future.result() for future in futures]

    def _request(self, messages, tools, config, deadline: float):
        kwargs = dict(model=self.model, messages=_openai_messages(messages), max_tokens=config.max_new_tokens,
                      temperature=config.temperature, top_p=config.top_p,
                      timeout=min(self.timeout, deadline - time.perf_counter()))
        if config.seed is not None:
            kwargs["seed"] = config.seed
        if tools:
            kwargs["tools"] = tools
        with request_bounds(deadline):
            response = self.client.chat.completions.create(**kwargs)
        if not getattr(response, "choices", None):
            raise ValueError(f"malformed response without choices: {str(response)[:200]!r}")
        return response

    def _generate_one(self, messages, tools, config, batch_deadline: float = float("inf")) -> Generation:
        start = time.perf_counter()
        deadline = min(start + self.deadline_s if self.deadline_s else float("inf"), batch_deadline)
        limits = f"deadline {_seconds(self.deadline_s)}, batch deadline {_seconds(self.batch_deadline_s)}" + (
            ", the round's deadline" if self.not_after < float("inf") else "")
        if start >= batch_deadline:  # the batch's other items took its time, or the round's is up
            return _failed(start, f"not sent: the batch's time was up ({limits})")
        error, repeats = None, 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                pause = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
                if time.perf_counter() + pause >= deadline:
                    error = f"{error}; no time left for another try ({limits})"
                    break
                with self._lock:
                    self.num_retries += 1
                time.sleep(pause)
            if not self._paced(deadline):
                error = f"{error}; no time left to start a request at its pace ({limits})"
                break
            try:
                response = self._request(messages, tools, config, deadline)
                return _generation(response, seconds=time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - any failure of one item becomes its error, never the batch's
                previous, error = error, _error_text(exc)
                if not _retryable(exc):
                    break
                repeats = repeats + 1 if error == previous and _server_error(exc) else 0
                if repeats == SAME_SERVER_ERROR_TRIES - 1:  # the same 5xx for the same request: it will not pass
                    error = f"{error} (the same server error {SAME_SERVER_ERROR_TRIES} times: not retried again)"
                    break
        return _failed(start, f"failed after {attempt + 1} attempt(s): {error}")


    def _paced(self, deadline: float) -> bool:
        """Wait for this request's turn under `min_interval_s` (each thread takes the next free slot); False, without
        waiting, when the slot falls after `deadline`."""
        if not self.min_interval_s:
            return True
        with self._lock:
            slot = max(time.perf_counter(), self._next_start)
            if slot >= deadline:
                return False
            self._next_start = slot + self.min_interval_s
        time.sleep(max(0.0, slot - time.perf_counter()))
        return True


MAX_RESPONSE_BYTES = 16 * 2**20
"""Most bytes an endpoint's answer to one request may take, headers and body (a reply's text is bounded far below:
`max_new_tokens`); more is a read error of that request, never held whole."""
_bounds = threading.local()
"""The deadline (`time.perf_counter`) and the bytes read so far of the request this thread is making."""


@contextlib.contextmanager
def request_bounds(deadline: float):
    """Inside the block, every read and write of this thread's requests (through `_bounded_http_client`) ends by
    `deadline`, and their answers stop at `MAX_RESPONSE_BYTES`: a total bound, where the client's timeout starts
    again at every byte a trickling server sends."""
    _bounds.deadline, _bounds.read = deadline, 0
    try:
        yield
    finally:
        _bounds.deadline = None


def _left(timeout: float | None) -> float | None:
    """`timeout`, cut to what is left of this thread's request deadline (a timeout error when nothing is)."""
    import httpcore2

    deadline = getattr(_bounds, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.perf_counter()
    if left <= 0:
        raise httpcore2.ReadTimeout("the request's deadline passed (the server answers too slowly)")
    return left if timeout is None else min(timeout, left)


def _bounded_http_client():
    """The openai client's HTTP client, with httpcore's own network streams wrapped so that `request_bounds` holds
    for every read and write (the connection pool's backend is the one place httpx lets them be reached)."""
    import httpcore2
    import httpx2
    import openai

    class BoundedStream(httpcore2.NetworkStream):
        def __init__(self, stream):
            self.stream = stream

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            data = self.stream.read(max_bytes, _left(timeout))
            if getattr(_bounds, "deadline", None) is not None:
                _bounds.read += len(data)
                if _bounds.read > MAX_RESPONSE_BYTES:
                    raise httpcore2.ReadError(f"the answer is over {MAX_RESPONSE_BYTES // 2**20} MiB: not read further")
            return data

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.stream.write(buffer, _left(timeout))

        def close(self) -> None:
            self.stream.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return BoundedStream(self.stream.start_tls(ssl_context, server_hostname, _left(timeout)))

        def get_extra_info(self, info: str):
            return self.stream.get_extra_info(info)

    class BoundedBackend(httpcore2.NetworkBackend):
        def __init__(self):
            self.backend = httpcore2.SyncBackend()

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return BoundedStream(self.backend.connect_tcp(host, port, _left(timeout), local_address, socket_options))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return BoundedStream(self.backend.connect_unix_socket(path, _left(timeout), socket_options))

        def sleep(self, seconds: float) -> None:
            self.backend.sleep(seconds)

    transport = httpx2.HTTPTransport()
    transport._pool._network_backend = BoundedBackend()
    return openai.DefaultHttpx2Client(transport=transport)


def _failed(start: float, error: str) -> Generation:
    return Generation(text="", tool_calls=None, prompt_tokens=0, completion_tokens=0,
                      seconds=time.perf_counter() - start, finish_reason="error", error=error)


WAIT_NOTICE_S = 10.0
"""Seconds a batch of endpoint calls waits before the model says on stderr what it is waiting for."""


def _seconds(limit: float | None) -> str:
    return "unbounded" if limit is None else f"{limit:g} s"


class MalformedResponse(ValueError):
    """An endpoint's HTTP 200 whose fields are not what the OpenAI API returns (retried, then the item's error)."""


def _generation(response, seconds: float) -> Generation:
    """The Generation of one chat-completions response; a MalformedResponse naming the field that is missing or of
    the wrong type (a `usage` that is no object, token counts that are no integers, content that is no string)."""
    try:
        choice = response.choices[0]
        message = choice.message
        text = message.content or ""
        if not isinstance(text, str):
            raise TypeError(f"message.content is a {type(text).__name__}")
        structured = [c for c in (message.tool_calls or []) if getattr(c, "function", None)]
        calls = [{"id": call_id, "name": c.function.name, "arguments": _parse_arguments(c.function.arguments)}
                 for c, call_id in zip(structured, kept_call_ids([getattr(c, "id", None) for c in structured]))]
        usage = response.usage
        tokens = [getattr(usage, name) if usage is not None else 0 for name in ("prompt_tokens", "completion_tokens")]
        if any(type(count) is not int or count < 0 for count in tokens):
            raise TypeError(f"usage token counts {str(tokens)[:80]} are not non-negative integers")
    except (AttributeError, IndexError, KeyError, TypeError) as exc:
        raise MalformedResponse(f"malformed response: {type(exc).__name__}: {str(exc)[:200]}") from None
    return Generation(text=text, tool_calls=calls or None, prompt_tokens=tokens[0], completion_tokens=tokens[1],
                      seconds=seconds, finish_reason="length" if choice.finish_reason == "length" else "stop")

