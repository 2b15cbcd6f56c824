"""A procedure's declaration, and everything it holds.

``Router("memory", __name__, description=..., middleware=[...])`` and, on a handler,
``@router.mutation("update", input=UpdateInput(), output=outputs.MEMORY,
errors=[NotFound])`` declare ``memory.update``: a mutation, its input
schema, its output (how the handler's result becomes JSON, and that JSON's
schema), the errors it can answer beyond those every call can, and the
middleware it runs through (which may name its own errors and the
credential it checks). The wire (:mod:`.trpc`), the OpenAPI document
(:mod:`.openapi`) and the table of procedures in docs/api.md
(:mod:`.procedure_table`) all read these declarations and nothing else.
"""

from __future__ import annotations

import dataclasses
import typing as t

from flask import Blueprint
from flask.sansio.app import App
from marshmallow import Schema

from .. import wire
from ..errors import HTTP_STATUS
from ..errors import ApiError
from ..errors import BadRequest
from ..errors import InternalError
from ..errors import PayloadTooLarge
from ..errors import ServiceUnavailable
from ..errors import UnsupportedMediaType
from .context import Exchange

if t.TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import FullStore

QUERY = "query"
MUTATION = "mutation"


class Inputs(t.Protocol):
    """The inputs of a request's calls, read once (the wire's :class:`~.trpc._Inputs`)."""

    is_batch: bool

    def get(self, index: int) -> t.Any:
        """Call ``index``'s input (a batch's), or the request's one."""


@dataclasses.dataclass
class Call:
    """One procedure call of a request; a batch holds several."""

    path: str
    index: int
    procedure: Procedure | None
    inputs: Inputs
    #: The request it came in: app, settings, runtime, store.
    exchange: Exchange
    #: Set by the authenticating middleware.
    caller: t.Any = None
    #: Bytes of answer this call may still produce (see _Budget).
    budget: int = 0

    def raw_input(self) -> t.Any:
        return self.inputs.get(self.index)

    def store(self) -> FullStore:
        """The request's store."""
        return self.exchange.store()

    @property
    def runtime(self) -> Runtime:
        return self.exchange.runtime

    @property
    def config(self) -> t.Mapping[str, t.Any]:
        """The app's settings."""
        return self.exchange.config


Json = dict[str, t.Any]
Error = type[ApiError]

#: What any call can be answered with, whatever its procedure: its input is
#: invalid or the request malformed (400); the request body is over the
#: limit, or the request's answers past their budget (413); something
#: unexpected failed (500); the storage cannot take the call, or the
#: embedding provider is too slow to wait for (503).
COMMON_ERRORS: tuple[Error, ...] = (BadRequest, PayloadTooLarge, InternalError, ServiceUnavailable)
#: What any mutation can be answered with too: a body that is not JSON (415).
MUTATION_ERRORS: tuple[Error, ...] = (UnsupportedMediaType,)


def status(error: Error) -> int:
    return HTTP_STATUS[error.code]


@dataclasses.dataclass(frozen=True)
class Component:
    """A named JSON Schema: one of the OpenAPI document's ``components/schemas``."""

    name: str
    schema: Json

    @classmethod
    def of(cls, shape: wire.Shape[t.Any]) -> Component:
        return cls(shape.name, shape.schema())

    @property
    def ref(self) -> Json:
        return {"$ref": f"#/components/schemas/{self.name}"}


@dataclasses.dataclass(frozen=True)
class Output:
    """What a procedure answers: its JSON Schema, and how the handler's result becomes that JSON."""

    #: The JSON Schema of the answer's data, referring to :attr:`components`.
    schema: Json
    components: tuple[Component, ...]
    #: The answer in words, for the docs: ``list of Memory``.
    shown: str
    #: Turns the handler's result into the JSON value sent; None: sent as it is.
    serialise: t.Callable[[t.Any], t.Any] | None = None
    #: Writes that value's JSON text directly, the very bytes encoding it gives
    #: (for the answers sent most); None: it is encoded.
    text: t.Callable[[t.Any], str] | None = None

    @classmethod
    def one(
        cls,
        component: Component,
        serialise: t.Callable[[t.Any], t.Any] | None = None,
        text: t.Callable[[t.Any], str] | None = None,
    ) -> Output:
        """One object of ``component``."""
        return cls(component.ref, (component,), component.name, serialise, text)

    @classmethod
    def list_of(
        cls,
        component: Component,
        each: t.Callable[[t.Any], t.Any],
        each_text: t.Callable[[t.Any], str] | None = None,
    ) -> Output:
        """A list of ``component``'s objects, ``each`` turning one item of the result into one."""
        return cls(
            {"type": "array", "items": component.ref},
            (component,),
            f"list of {component.name}",
            lambda items: [each(item) for item in items],
            None if each_text is None else (lambda items: wire.list_text(map(each_text, items))),
        )

    def dump(self, result: t.Any) -> t.Any:
        return result if self.serialise is None else self.serialise(result)

    def encode(self, result: t.Any) -> str:
        """The JSON text of :meth:`dump`'s value."""
        if self.text is not None:
            return self.text(result)
        return wire.encode(self.dump(result))


@dataclasses.dataclass(frozen=True)
class Credential:
    """What callers prove who they are with: one of the OpenAPI document's security schemes."""

    #: The scheme's name in the document.
    name: str
    #: The OpenAPI security scheme.
    scheme: Json
    #: How the docs name it.
    shown: str


@dataclasses.dataclass(frozen=True)
class Middleware:
    """A step every call of a router goes through before its handler.

    ``before(call)`` may refuse the call by raising one of its
    :attr:`errors`, and may take something (a concurrency slot) that
    ``after(call, taken)`` gives back once the call is answered, however it
    ended. Plain functions, not context managers: they run on every call.
    """

    before: t.Callable[[Call], t.Any]
    #: The errors it refuses calls with, beyond those every call can get.
    errors: tuple[Error, ...] = ()
    #: The credential it checks, if it authenticates the caller.
    credential: Credential | None = None
    #: Called with what :attr:`before` returned, after the handler; None: nothing to give back.
    after: t.Callable[[Call, t.Any], None] | None = None


def middleware(
    *,
    errors: t.Sequence[Error] = (),
    credential: Credential | None = None,
    after: t.Callable[[Call, t.Any], None] | None = None,
) -> t.Callable[[t.Callable[[Call], t.Any]], Middleware]:
    """Declare a middleware: ``@middleware(errors=[Unauthorized], credential=API_KEY)``."""

    def declare(before: t.Callable[[Call], t.Any]) -> Middleware:
        return Middleware(before, tuple(errors), credential, after)

    return declare


_T = t.TypeVar("_T")


def through(chain: t.Sequence[Middleware], call: Call, handle: t.Callable[[], _T]) -> _T:
    """``handle()`` once ``call`` has passed every middleware of ``chain``, in order.

    What a middleware took is given back, last taken first, however the
    call ended; a refusal stops the chain there.
    """
    taken: list[tuple[t.Callable[[Call, t.Any], None], t.Any]] = []
    try:
        for step in chain:
            held = step.before(call)
            if step.after is not None:
                taken.append((step.after, held))
        return handle()
    finally:
        _give_back(taken, call)


def _give_back(taken: list[tuple[t.Callable[[Call, t.Any], None], t.Any]], call: Call) -> None:
    while taken:
        give_back, held = taken.pop()
        try:
            give_back(call, held)
        except BaseException:
            _give_back(taken, call)  # the others are still given back
            raise


@dataclasses.dataclass(frozen=True)
class Procedure:
    """One procedure as declared: all the wire, the document and the docs know of it."""

    path: str
    type: str
    handler: t.Callable[[Call, dict[str, t.Any]], t.Any]
    #: Validates and loads the input object; None: the procedure takes none.
    input: Schema | None
    output: Output
    middleware: tuple[Middleware, ...] = ()
    #: The errors its handler answers with beyond the common ones and its middleware's.
    errors: tuple[Error, ...] = ()

    @property
    def input_optional(self) -> bool:
        """Whether a call may leave the input out (it is then read as ``{}``)."""
        return bool(getattr(self.input, "optional", False))

    @property
    def credential(self) -> Credential | None:
        return next((m.credential for m in self.middleware if m.credential), None)

    def common_errors(self) -> tuple[Error, ...]:
        """What any call of its type can be answered with."""
        return COMMON_ERRORS + (MUTATION_ERRORS if self.type == MUTATION else ())

    def own_errors(self) -> tuple[Error, ...]:
        """What it can answer beyond the common errors: its middleware's and its handler's."""
        errors = [e for m in self.middleware for e in m.errors] + list(self.errors)
        return tuple(dict.fromkeys(errors))

    def statuses(self, *, common: bool = True) -> list[int]:
        """The HTTP statuses of its errors, in order."""
        errors = self.own_errors() + (self.common_errors() if common else ())
        return sorted({status(e) for e in errors})


class Router(Blueprint):
    """A tRPC router: a blueprint whose procedures ``/trpc`` serves.

    ``Router("memory", __name__, description=...)`` with
    ``@router.query("search", ...)`` serves ``memory.search``. Registering
    the blueprint on an app adds its procedures to the app's registry
    (``app.extensions["trpc"]``), and itself to its routers.
    """

    def __init__(
        self,
        name: str,
        import_name: str,
        *,
        description: str,
        middleware: t.Sequence[Middleware] = (),
    ):
        super().__init__(name, import_name)
        #: What its procedures are about, in a few words.
        self.description = description
        self.middleware = tuple(middleware)
        self.procedures: dict[str, Procedure] = {}

    def query(
        self,
        name: str,
        *,
        output: Output,
        input: Schema | None = None,
        errors: t.Sequence[Error] = (),
    ) -> t.Callable[[t.Callable], t.Callable]:
        return self._procedure(name, QUERY, output, input, errors)

    def mutation(
        self,
        name: str,
        *,
        output: Output,
        input: Schema | None = None,
        errors: t.Sequence[Error] = (),
    ) -> t.Callable[[t.Callable], t.Callable]:
        return self._procedure(name, MUTATION, output, input, errors)

    def _procedure(
        self,
        name: str,
        type_: str,
        output: Output,
        input: Schema | None,
        errors: t.Sequence[Error],
    ) -> t.Callable[[t.Callable], t.Callable]:
        def decorator(handler: t.Callable) -> t.Callable:
            path = f"{self.name}.{name}"
            self.procedures[path] = Procedure(
                path, type_, handler, input, output, self.middleware, tuple(errors)
            )
            return handler

        return decorator

    def register(self, app: App, options: dict) -> None:
        super().register(app, options)
        app.extensions.setdefault("trpc", {}).update(self.procedures)
        app.extensions.setdefault("trpc_routers", []).append(self)
