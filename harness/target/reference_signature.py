"""What a plain launcher for a reference receives, measured from the reference: its input,
parameter/buffer and output tensors in the harness's order and the scalars it fills by name.
`init` puts it in the prompt so the LLM needn't guess (a BatchNorm's int64
`num_batches_tracked`). Shapes come from the meta device, in a child process (`python -m
kernelblaster.harness.target.reference_signature`), since importing the reference runs the user's
code. Importing this module does not import torch."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Literal

import msgspec

from kernelblaster.harness.protocol.records import HarnessError

Role = Literal["input", "parameter", "buffer", "output"]


class SignatureRequest(msgspec.Struct, kw_only=True):
    reference: str  # absolute path of the KernelBench-style .py


class TensorSlot(msgspec.Struct, kw_only=True):
    """One pointer parameter of the launcher."""

    role: Role
    name: str  # "input 0", a state_dict key, "output 0"
    dtype: str  # "float32", "int64", ...
    shape: list[int]


class ScalarValue(msgspec.Struct, kw_only=True):
    name: str
    value: float | int
    origin: Literal["model attribute", "module constant"]


class SignatureResponse(msgspec.Struct, kw_only=True, tag="result"):
    pointers: list[TensorSlot] = []  # in the order the launcher receives them
    scalars: list[ScalarValue] = []
    # Parts that could not be measured on the meta device (e.g. forward() reads a value with
    # .item()): the LLM derives those from the source.
    unknown: list[str] = []
    error: HarnessError | None = None


def _dtype(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _numeric(value: object) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, int | float) else None


def _scalars(model, module, module_own: set[str]) -> list[ScalarValue]:
    """In the harness's order of precedence: a model attribute shadows a module constant.
    `module_own`: what every nn.Module has (`training`), which no launcher means."""
    found: dict[str, ScalarValue] = {}
    for name, value in vars(module).items():
        if not name.startswith("_") and (number := _numeric(value)) is not None:
            found[name] = ScalarValue(name=name, value=number, origin="module constant")
    model_attributes = vars(model).items() if model is not None else ()
    for name, value in model_attributes:
        if name in module_own or name.startswith("_"):
            continue
        if (number := _numeric(value)) is not None:
            found[name] = ScalarValue(name=name, value=number, origin="model attribute")
    return sorted(found.values(), key=lambda s: s.name)


def describe(path: Path) -> SignatureResponse:
    import torch

    from kernelblaster.harness.target.reference import ReferenceError_, as_outputs, load_module

    try:
        module = load_module(path, "kernelblaster_signature_reference")
    except ReferenceError_ as exc:
        return SignatureResponse(error=exc.error)
    response = SignatureResponse()
    torch.manual_seed(0)
    # Each part is measured on its own: what fails on the meta device is left to the source.
    # These run the user's module, whose errors can be of any type.
    try:
        with torch.device("meta"):
            inputs = [x for x in module.get_inputs() if isinstance(x, torch.Tensor)]
        response.pointers += [
            TensorSlot(role="input", name=f"input {i}", dtype=_dtype(x), shape=list(x.shape))
            for i, x in enumerate(inputs)
        ]
    except Exception as exc:  # noqa: BLE001 - reported to the LLM as unknown, not fatal
        inputs = None
        response.unknown.append(f"the inputs (get_inputs() failed on the meta device: {exc})")
    try:
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs()).eval()
        parameters = {name for name, _ in model.named_parameters()}
        response.pointers += [
            TensorSlot(
                role="parameter" if name in parameters else "buffer",
                name=name,
                dtype=_dtype(tensor),
                shape=list(tensor.shape),
            )
            for name, tensor in model.state_dict().items()
        ]
    except Exception as exc:  # noqa: BLE001 - as above
        model = None
        response.unknown.append(f"the parameters (Model() failed on the meta device: {exc})")
    if model is not None and inputs is not None:
        try:
            with torch.no_grad():
                outputs = as_outputs(model(*inputs))
            response.pointers += [
                TensorSlot(role="output", name=f"output {i}", dtype=_dtype(y), shape=list(y.shape))
                for i, y in enumerate(outputs)
            ]
        except Exception as exc:  # noqa: BLE001 - as above
            response.unknown.append(f"the outputs (forward() failed on the meta device: {exc})")
    response.scalars = _scalars(model, module, set(vars(torch.nn.Module())))
    return response


_decoder = msgspec.json.Decoder(SignatureResponse)


def measure_signature(reference: Path, *, timeout_s: float) -> SignatureResponse:
    """The signature, measured in a child process that is killed after `timeout_s`. A child
    that fails (no torch here, a hang) gives a response with only `unknown` set: the
    signature is a help for the prompt, never a reason to stop."""
    from kernelblaster.harness.protocol.worker_client import run_worker
    from kernelblaster.harness.protocol.worker_failures import WorkerFailed

    command = [sys.executable, "-m", "kernelblaster.harness.target.reference_signature"]
    request = SignatureRequest(reference=str(reference))
    try:
        return asyncio.run(
            run_worker(
                command, request, _decoder, SignatureResponse, lambda _m: None, timeout_s=timeout_s
            )
        )
    except WorkerFailed as failure:
        tail = failure.log.strip().splitlines()[-1:] or [failure.message]
        return SignatureResponse(unknown=[f"the whole signature ({tail[0][:300]})"])


def main() -> int:
    from kernelblaster.harness.protocol.processes import exit_with_parent
    from kernelblaster.harness.protocol.protocol_stream import ProtocolStream

    exit_with_parent()
    stream = ProtocolStream()  # the reference's own prints go to stderr
    request = msgspec.json.decode(sys.stdin.buffer.read(), type=SignatureRequest)
    stream.emit(describe(Path(request.reference)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
