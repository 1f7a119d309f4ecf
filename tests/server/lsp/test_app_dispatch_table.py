"""The dispatch table (server/lsp/app.py): every method is registered so that pygls hands its
handler the server (it does so only for a first parameter named ``ls``), and a feature of a
RequestContext gets the server's current state."""

from __future__ import annotations


from pygls.feature_manager import has_ls_param_or_annotation

from msprof_lsp.server.lsp import app, pull
from msprof_lsp.server.lsp.guard import guarded
from msprof_lsp.server.lsp.inlay_hints import inlay_hints
from msprof_lsp.server.lsp.state.context import RequestContext, with_context


def test_every_registered_handler_gets_the_server() -> None:
    ls = app.create_server()
    registered = {**ls.protocol.fm.features, **ls.protocol.fm.commands}
    assert set(ls.protocol.fm.features) == {r.method for r in app.ROUTES}
    assert set(ls.protocol.fm.commands) == {name for name, _ in app.COMMANDS}
    # pygls binds the server to what it registers (a partial, or a coroutine wrapper with .func)
    missing = [m for m, f in registered.items() if getattr(f, "func", None) is None]
    assert missing == []
    # the ones lifecycle.initialize registers once the client supports them
    for late in (with_context(pull.document_diagnostic), with_context(inlay_hints), pull.workspace_diagnostic):
        assert has_ls_param_or_annotation(guarded(name="late")(late), type(ls)), late


def test_a_feature_sees_the_context_of_the_server_it_is_called_for() -> None:
    seen: list[RequestContext] = []

    def feature(ctx: RequestContext, params: object) -> object:
        seen.append(ctx)
        return params

    ls = app.create_server()
    assert with_context(feature)(ls, "p") == "p"
    (ctx,) = seen
    assert ctx.snapshot is ls.snapshot and ctx.documents is ls.documents and ctx.caps is ls.caps
    assert ctx.settings is ls.settings and ctx.memo is ls.memo and ctx.document("file:///nowhere.py") is None
    assert with_context(feature).__name__ == "feature"  # the log names the feature
