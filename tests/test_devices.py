"""--device: every name resolves the same way, and a GPU asked for where there is none is one clear error;
the copy stage (StreamCopy) driven through a stand-in for CUDA's streams, on any machine."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from gnnscale.devices import CudaStreams, StreamCopy, resolve_device


def test_cpu_names_resolve_to_the_cpu():
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_auto_is_cuda_exactly_when_a_gpu_is_visible():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "mps", ""])
def test_names_that_are_no_device_are_refused(bad):
    with pytest.raises(ValueError, match="device: expected cpu, cuda, cuda:N or auto"):
        resolve_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error for a machine without a GPU")
@pytest.mark.parametrize("spec", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_one_line_naming_the_way_out(spec):
    with pytest.raises(ValueError, match="none is available here.*use --device cpu") as info:
        resolve_device(spec)
    assert "\n" not in str(info.value)


@pytest.mark.gpu
def test_cuda_takes_the_workers_gpu_modulo_the_visible_ones():
    count = torch.cuda.device_count()
    assert resolve_device("cuda", local_rank=count + 1) == torch.device("cuda", 1 % count)
    with pytest.raises(ValueError, match="GPU"):
        resolve_device(f"cuda:{count}")


class StandInStream:
    """A CUDA stream's part that StreamCopy uses: the events waited on, the tensors recorded on it."""

    def __init__(self) -> None:
        self.waited: list = []
        self.recorded: list[torch.Tensor] = []

    def wait_event(self, event) -> None:
        self.waited.append(event)


class StandInEvent:
    def __init__(self) -> None:
        self.stream = None

    def record(self, stream) -> None:
        self.stream = stream


class OnDevice(torch.Tensor):
    """A host tensor standing in for a copy on the GPU: record_stream notes itself on the stream."""

    def record_stream(self, stream) -> None:
        stream.recorded.append(self)


class StandInCuda(CudaStreams):
    """Streams, events and copies of host tensors: what StreamCopy asks of CUDA, recorded."""

    def __init__(self) -> None:
        self.side, self.consumer = StandInStream(), StandInStream()
        self.current: list = []  # the streams made current by use(), innermost last
        self.sent: list[torch.Tensor] = []

    def new_stream(self, device):
        return self.side

    @contextmanager
    def use(self, stream):
        self.current.append(stream)
        yield
        self.current.pop()

    def new_event(self):
        return StandInEvent()

    def current_stream(self, device):
        return self.consumer

    def copy(self, t, device):
        assert self.current[-1:] == [self.side], "copies are queued on the side stream"
        out = t.clone().as_subclass(OnDevice)
        self.sent.append(out)
        return out


def map_dict(value: dict, fn) -> dict:
    return {key: fn(v) for key, v in value.items()}


def test_stream_copy_records_the_consumers_stream_on_every_tensor_it_sends():
    # The caching allocator may hand a sent tensor's memory to a later copy unless the consumer's stream is
    # recorded on it: every tensor of every batch, after the consumer's stream waits on the batch's event.
    cuda = StandInCuda()
    copy = StreamCopy(torch.device("cuda"), cuda=cuda)
    batches = [{"x": torch.rand(3, 2), "edge_index": torch.zeros(2, 4, dtype=torch.int64), "batch_size": 3},
               {"x": torch.rand(1, 2), "y": torch.arange(1)}]
    sent = []
    for batch in batches:
        with copy.producing():
            sent.append(copy.send(batch, map_dict))
    assert len(cuda.sent) == 4 and cuda.consumer.recorded == []  # nothing is recorded before it is received
    got = [copy.receive(s) for s in sent]
    assert [s.ready.stream for s in sent] == [cuda.side] * 2 and cuda.consumer.waited == [s.ready for s in sent]
    device_tensors = [t for batch in got for t in batch.values() if isinstance(t, torch.Tensor)]
    assert [id(t) for t in cuda.consumer.recorded] == [id(t) for t in device_tensors] == [id(t) for t in cuda.sent]
    assert got[0]["batch_size"] == 3 and all(torch.equal(g["x"], b["x"]) for g, b in zip(got, batches))
