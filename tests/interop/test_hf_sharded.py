"""Hugging Face's sharded layout (hf_sharded) against the real transformers
and safetensors: tiny models built from configs (nothing downloaded) saved
by ckpt and loaded by transformers, and the reverse; each shard opened by
safetensors.safe_open; the CLI's split and merge; malformed indexes."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import ckpt

transformers = pytest.importorskip("transformers")
from transformers.trainer_utils import load_sharded_checkpoint  # noqa: E402

INDEX = "model.safetensors.index.json"


def bert(seed):
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=48, max_position_embeddings=16)
    return transformers.BertModel(config).eval()


def gpt2(seed):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    return transformers.GPT2LMHeadModel(config).eval()


def assert_same_state(a, b):
    assert set(a) == set(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert torch.equal(a[name], b[name]), name


def shards_of(directory):
    with open(directory / INDEX) as f:
        return sorted(set(json.load(f)["weight_map"].values()))


@pytest.mark.parametrize("make", [bert, gpt2], ids=["bert", "gpt2_tied"])
@pytest.mark.parametrize("extras", [True, False], ids=["extras", "plain"])
def test_transformers_loads_what_ckpt_writes(tmp_path, make, extras):
    model = make(1)
    state = model.state_dict()
    out = tmp_path / "model"
    ckpt.save(out, state, max_shard_bytes=20_000, extras=extras)
    assert len(shards_of(out)) > 2
    other = make(2)
    assert not all(torch.equal(v, other.state_dict()[k]) for k, v in state.items())
    result = load_sharded_checkpoint(other, out)  # strict: every key of the model in weight_map
    assert not result.missing_keys and not result.unexpected_keys
    assert_same_state(state, other.state_dict())
    # The real front door too: config.json beside the shards.
    model.config.save_pretrained(out)
    loaded = type(model).from_pretrained(out)
    assert_same_state(state, loaded.state_dict())


def test_ckpt_reads_what_save_pretrained_writes(tmp_path, run, inspect_json):
    model = gpt2(3)
    out = tmp_path / "pretrained"
    model.save_pretrained(out, max_shard_size="20KB")
    assert len(shards_of(out)) > 2
    loaded = ckpt.load(out, framework="torch")
    expected = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied: not saved
    assert_same_state(expected, loaded)
    info = inspect_json(out)
    assert info["format"] == "hf_sharded"
    assert {t["name"] for t in info["tensors"]} == set(expected)
    # Merged into one file, bit-exact.
    run("convert", out, tmp_path / "merged.safetensors")
    assert_same_state(expected, load_file(tmp_path / "merged.safetensors"))


def test_every_shard_opens_with_safe_open(tmp_path):
    state = bert(4).state_dict()
    out = tmp_path / "model"
    ckpt.save(out, state, max_shard_bytes=10_000)
    text = (out / INDEX).read_text()
    index = json.loads(text)
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"  # ckpt's record too
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in state.values())
    seen = {}
    for shard in shards_of(out):
        with safe_open(str(out / shard), framework="pt") as f:
            assert f.metadata()["format"] == "pt"
            for name in f.keys():
                assert index["weight_map"][name] == shard
                seen[name] = f.get_tensor(name)
    assert_same_state(state, seen)


def test_cli_splits_and_merges_bit_exact(tmp_path, run, inspect_json):
    state = bert(5).state_dict()
    single = tmp_path / "model.safetensors"
    ckpt.save(single, state, metadata={"format": "pt"})
    out = tmp_path / "shards"
    result = run("convert", single, out, "--to", "safetensors", "--max-shard-size", "10K")
    assert "hf_sharded" in result.stdout or "safetensors" in result.stdout
    files = sorted(os.listdir(out))
    assert INDEX in files and len(files) > 3
    assert all(name == INDEX or name.startswith("model-000") for name in files)
    for shard in shards_of(out):
        assert os.path.getsize(out / shard) <= 10 * 1024 + 4096  # one tensor may exceed; these are small
    info = inspect_json(out)
    assert info["format"] == "hf_sharded"
    run("convert", out, tmp_path / "merged.safetensors")
    assert (tmp_path / "merged.safetensors").read_bytes() == single.read_bytes()
    assert_same_state(state, ckpt.load(out, framework="torch"))


def test_python_and_cli_name_a_malformed_index(tmp_path, run):
    out = tmp_path / "model"
    ckpt.save(out, bert(6).state_dict(), max_shard_bytes=20_000)
    index = json.loads((out / INDEX).read_text())
    good = dict(index)
    cases = {
        "not json": "{\"weight_map\": ",
        "no weight_map": json.dumps({"metadata": {}}),
        "escaping file": json.dumps({**good, "weight_map": {**good["weight_map"], "pooler.dense.bias": "../x"}}),
        "missing shard": json.dumps({**good, "weight_map": {**good["weight_map"],
                                                            "pooler.dense.bias": "model-00009-of-00009.safetensors"}}),
        "absent tensor": json.dumps({**good, "weight_map": {**good["weight_map"], "extra": shards_of(out)[0]}}),
    }
    for what, text in cases.items():
        (out / INDEX).write_text(text)
        with pytest.raises(ckpt.CorruptCheckpointError, match=INDEX):
            ckpt.load(out)
        result = run("inspect", out, expect=None)
        assert result.returncode != 0, what
        assert INDEX in result.stderr, (what, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr


def test_index_is_byte_identical_to_huggingface_hubs(tmp_path):
    from huggingface_hub import split_torch_state_dict_into_shards
    state = bert(7).state_dict()
    out = tmp_path / "model"
    ckpt.save(out, state, max_shard_bytes=20_000, extras=False)
    split = split_torch_state_dict_into_shards(state, max_shard_size=20_000)
    assert split.is_sharded
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    assert (out / INDEX).read_text() == json.dumps(index, indent=2, sort_keys=True) + "\n"


def test_the_index_file_and_open_name_the_directory_too(tmp_path):
    state = bert(8).state_dict()
    out = tmp_path / "model"
    ckpt.save(out, state, max_shard_bytes=20_000)
    assert_same_state(state, ckpt.load(out / INDEX, framework="torch"))
    with ckpt.open(out, framework="torch") as f:
        assert f.format == "hf_sharded"
        assert set(f.keys()) == set(state)
        name = "encoder.layer.1.attention.self.query.weight"
        assert torch.equal(f.get(name), state[name])


def test_sliced_tensors_written_by_another_writer(tmp_path):
    """Issue 20's slice record, written here with safetensors' own writer:
    two ranks' pieces of one global tensor, beside an ordinary tensor."""
    from safetensors.torch import save_file
    out = tmp_path / "sliced"
    out.mkdir()
    torch.manual_seed(9)
    weight = torch.randn(6, 4)
    bias = torch.randn(4)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file({"bias": bias, "__ckpt_piece__/w/0,0": weight[:2].contiguous()}, str(out / files[0]),
              metadata={"format": "pt"})
    save_file({"__ckpt_piece__/w/2,0": weight[2:].contiguous()}, str(out / files[1]), metadata={"format": "pt"})
    index = {
        "ckpt": {"version": 1, "slices": {"w": {"dtype": "float32", "shape": [6, 4], "pieces": [
            {"file": files[0], "key": "__ckpt_piece__/w/0,0", "offsets": [0, 0], "sizes": [2, 4]},
            {"file": files[1], "key": "__ckpt_piece__/w/2,0", "offsets": [2, 0], "sizes": [4, 4]}]}}},
        "metadata": {"total_size": (weight.numel() + bias.numel()) * 4},
        "weight_map": {"bias": files[0]},
    }
    (out / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    loaded = ckpt.load(out, framework="torch", verify=True)
    assert list(loaded) == ["bias", "w"]
    assert torch.equal(loaded["w"], weight) and torch.equal(loaded["bias"], bias)
    part = ckpt.load(out, framework="torch", boxes={"w": ([1, 1], [3, 2])})
    assert torch.equal(part["w"], weight[1:4, 1:3])
    # Merged into one file: the global tensor, whole.
    merged = tmp_path / "merged.safetensors"
    ckpt.convert(out, merged)
    assert torch.equal(load_file(merged)["w"], weight)
    # transformers' loader sees only weight_map's tensors.
    assert set(json.loads((out / INDEX).read_text())["weight_map"]) == {"bias"}
    # Pieces that overlap: refused, naming the tensor.
    index["ckpt"]["slices"]["w"]["pieces"][1]["offsets"] = [1, 0]
    (out / INDEX).write_text(json.dumps(index))
    with pytest.raises(ckpt.CorruptCheckpointError, match="ckpt.slices.w"):
        ckpt.load(out)
