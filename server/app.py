"""Where LSP messages meet their handlers: one module per request (requests/), notification
(notifications/) or command (commands/), named after it. The state they share lives on
`KernelBlasterServer` (session/language_server.py). Handlers stay thin; anything that could block
runs in a worker process or a thread."""

from __future__ import annotations

from lsprotocol import types

from kernelblaster.server.commands import (
    init,
    kernel_at,
    kernel_profile,
    knowledge_base,
    ncu_report,
    optimize,
    profile,
    show_diff,
)
from kernelblaster.server.notifications import (
    did_change,
    did_change_configuration,
    did_close,
    did_open,
    did_save,
    initialized,
    trust_granted,
    work_done_progress_cancel,
)
from kernelblaster.server.requests import (
    code_action,
    code_lens,
    code_lens_resolve,
    hover,
    initialize,
    shutdown,
)
from kernelblaster.server.session.language_server import KernelBlasterServer
from kernelblaster.server.views import code_actions
from kernelblaster.server.views.code_lens import KERNEL_PROFILE, NCU_REPORT

server = KernelBlasterServer()

# lifecycle
server.feature(types.INITIALIZE)(initialize.initialize)
server.feature(types.INITIALIZED)(initialized.initialized)
server.feature(types.SHUTDOWN)(shutdown.shutdown)
server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)(
    did_change_configuration.did_change_configuration
)
server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)(work_done_progress_cancel.cancel_progress)
server.feature(trust_granted.TRUST_GRANTED)(trust_granted.trust_granted)
# documents
server.feature(types.TEXT_DOCUMENT_DID_OPEN)(did_open.did_open)
server.feature(types.TEXT_DOCUMENT_DID_CHANGE)(did_change.did_change)
server.feature(types.TEXT_DOCUMENT_DID_SAVE)(did_save.did_save)
server.feature(types.TEXT_DOCUMENT_DID_CLOSE)(did_close.did_close)
# answered from the cache
server.feature(types.TEXT_DOCUMENT_HOVER)(hover.hover)
server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[code_actions.KIND])
)(code_action.code_action)
server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=True))(
    code_lens.code_lens_request
)
server.feature(types.CODE_LENS_RESOLVE)(code_lens_resolve.code_lens_resolve)
# commands (workspace/executeCommand)
server.command(code_actions.KERNEL_AT)(kernel_at.kernel_at_command)
server.command(code_actions.OPTIMIZE)(optimize.optimize_command)
server.command(code_actions.INIT)(init.init_command)
server.command(code_actions.SHOW_DIFF)(show_diff.show_diff_command)
server.command(code_actions.PROFILE)(profile.profile_command)
server.command(code_actions.KNOWLEDGE_BASE)(knowledge_base.knowledge_base_command)
server.command(KERNEL_PROFILE)(kernel_profile.kernel_profile_command)
server.command(NCU_REPORT)(ncu_report.ncu_report_command)
