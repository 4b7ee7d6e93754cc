#!/usr/bin/env python3
"""Makes tests/fixtures/gguf_moe/: the mixture-of-experts fixtures of tests/fixtures/models converted to GGUF by
llama.cpp's own convert_hf_to_gguf.py (the copy vendored in llama-cpp-python, built under
build/llama.cpp-native; set LLAMA_CPP_DIR to use another checkout), run in this process so that two things
the tiny fixtures need can be patched in:

  * the vocabulary: the fixtures have no tokenizer files, so each model class's set_vocab writes a synthetic
    one instead (tokenizer.ggml.model "gpt2", tokens tok0 .. tok{vocab-1}, all normal) plus the special ids
    gguf.SpecialVocab reads from config.json, as the converter's own _set_vocab_gpt2 does;
  * qwen3_moe's dense layer: the fixture has mlp_only_layers [1] (layer 1 keeps Qwen3-MoE's dense MLP).
    llama.cpp lists no dense ffn_gate / ffn_up / ffn_down for its qwen3moe architecture (its converter fails
    with "Can not map tensor 'model.layers.1.mlp.down_proj.weight'" and its loader requires expert tensors in
    every block: no released Qwen3-MoE has a dense layer), so they are added to gguf-py's qwen3moe tensor list
    and the converter writes them under their usual names (blk.1.ffn_gate / ffn_up / ffn_down).

Everything else (names, metadata keys, the merged 3-D expert tensors, Mixtral's q/k row permutation, which
tensors stay F32 in a q8_0 file) is the converter's. Files:

  qwen3_moe_f32.gguf, qwen3_moe_q8_0.gguf   tests/fixtures/models/qwen3_moe (bf16 weights, 8 experts, top 3,
                                            norm_topk_prob true, layer 1 dense) with --outtype f32 / q8_0
  mixtral_f32.gguf, mixtral_q8_0.gguf       tests/fixtures/models/mixtral (4 experts, top 2), arch llama
  gpt_oss_mxfp4_f32.gguf                    tests/fixtures/models/gpt_oss_mxfp4 (the hub's layout: MXFP4 expert
                                            blocks, repacked by the converter into GGML's MXFP4; everything
                                            else f32), arch gpt-oss
  mixtral_legacy_q8_0.gguf                  mixtral_q8_0.gguf rewritten as llama.cpp's converter wrote Mixtral
                                            before April 2024: one tensor per expert, blk.N.ffn_gate.E.weight /
                                            ffn_up.E / ffn_down.E (same Q8_0 blocks, same metadata)

  qwen3_moe_q8_0_expected.json,            Transformers (float32, eager) holding the weights the q8_0 file
  mixtral_q8_0_expected.json                stores: every tensor the converter quantises (all of 2 or more
                                            dimensions but the routers) put through gguf-py's Q8_0 quantise and
                                            dequantise in HF's layout (blocks of 32 along each row, as the
                                            converter quantises its rows; Mixtral's q/k row permutation and
                                            the experts' split do not move values between rows): the logits of
                                            the golden's 7-token forward case at every position, and 16 greedy
                                            tokens after its 5-token greedy prompt with their smallest top-2
                                            margin

The f32 files' goldens are the fixtures' own golden.json (Transformers' float32 logits and greedy tokens). Run: /work/venv-gold/bin/python tools/make_moe_gguf_fixtures.py (deterministic: re-running gives the
same bytes).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf_moe")
LLAMA_CPP = os.environ.get("LLAMA_CPP_DIR", os.path.join(
    ROOT, "build", "llama.cpp-native", "src", "llama_cpp_python-0.3.36", "vendor", "llama.cpp"))

sys.path.insert(0, LLAMA_CPP)
sys.path.insert(1, os.path.join(LLAMA_CPP, "gguf-py"))
import gguf  # noqa: E402  (llama.cpp's own gguf-py, as the converter imports it)
import numpy as np  # noqa: E402
import convert_hf_to_gguf  # noqa: E402
from conversion.llama import LlamaModel  # noqa: E402
from conversion.qwen import Qwen3MoeModel  # noqa: E402
from conversion.gpt_oss import GptOssModel  # noqa: E402


def synthetic_vocab(self):
    n = self.hparams["vocab_size"]
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre("default")
    self.gguf_writer.add_token_list([f"tok{i}" for i in range(n)])
    self.gguf_writer.add_token_types([gguf.TokenType.NORMAL] * n)
    gguf.SpecialVocab(self.dir_model, load_merges=False, n_vocab=n).add_to_gguf(self.gguf_writer)


def patch_converter():
    Qwen3MoeModel.set_vocab = synthetic_vocab
    LlamaModel.set_vocab = synthetic_vocab
    GptOssModel.set_vocab = synthetic_vocab
    dense = [gguf.MODEL_TENSOR.FFN_GATE, gguf.MODEL_TENSOR.FFN_UP, gguf.MODEL_TENSOR.FFN_DOWN]
    tensors = gguf.MODEL_TENSORS[gguf.MODEL_ARCH.QWEN3MOE]
    tensors.extend(t for t in dense if t not in tensors)


def convert(model, outtype, out):
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", os.path.join(MODELS, model), "--outtype", outtype, "--outfile", out]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def legacy_per_expert(src, out):
    """src's 3-D expert tensors written one per expert (blk.N.ffn_{gate,up,down}.E.weight), as llama.cpp wrote
    Mixtral before it stacked them; metadata and every other tensor copied as they are."""
    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(out, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        t = field.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                v = [bytes(field.parts[i]).decode() for i in field.data]
            else:
                v = [field.parts[i].tolist()[0] for i in field.data]
            w.add_key_value(name, v, t, sub_type=sub)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(field.parts[-1]).decode(), t)
        else:
            w.add_key_value(name, field.parts[-1].tolist()[0], t)
    for t in r.tensors:
        raw = np.array(t.data)  # numpy shape: outermost first; block types as bytes per row
        if "_exps." in t.name:
            kind = t.name.split(".")[2].removesuffix("_exps")  # ffn_gate / ffn_up / ffn_down
            block = t.name.split(".")[1]
            for e in range(raw.shape[0]):
                w.add_tensor(f"blk.{block}.{kind}.{e}.weight", np.ascontiguousarray(raw[e]), raw_dtype=t.tensor_type)
        else:
            w.add_tensor(t.name, raw, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def q8_0_reference(model, gguf_path, out):
    import json

    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, model), dtype=torch.float32,
                                             attn_implementation="eager").eval()
    # What the file stores as Q8_0 (checked against it below): every parameter of 2+ dimensions but the router.
    stored = {t.name: t.tensor_type for t in gguf.GGUFReader(gguf_path).tensors}
    n_q8 = sum(1 for q in stored.values() if q == gguf.GGMLQuantizationType.Q8_0)
    rounded = 0
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() < 2 or name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight"):
                continue
            w = p.detach().float().numpy()
            q = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
            p.copy_(torch.from_numpy(gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(w.shape)))
            # the fused gate_up_proj is two stored tensors (ffn_gate_exps, ffn_up_exps)
            rounded += 2 if name.endswith("gate_up_proj") else 1
    assert rounded == n_q8, f"{model}: rounded {rounded} tensors, the file has {n_q8} Q8_0 tensors"
    g = json.load(open(os.path.join(MODELS, model, "golden.json")))
    case = g["forward"][1]
    with torch.no_grad():
        logits = m(torch.tensor([case["input_ids"]])).logits[0]
    prompt = g["greedy"][0]["input_ids"]
    ids, margin = list(prompt), float("inf")
    with torch.no_grad():
        for _ in range(16):  # no cache, argmax: as the goldens' manual loop
            last = m(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(last, 2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(torch.argmax(last)))
    with open(out, "w") as f:
        json.dump({"model": model, "file": os.path.basename(gguf_path),
                   "weights": "Transformers float32 holding gguf-py's Q8_0 round trip of every tensor the file "
                              "stores as Q8_0 (routers and norms as stored in float32)",
                   "input_ids": case["input_ids"],
                   "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()],
                   "greedy_input_ids": prompt, "greedy_output_ids": ids, "min_top2_margin": margin}, f)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    patch_converter()
    for model in ("qwen3_moe", "mixtral"):
        for outtype in ("f32", "q8_0"):
            convert(model, outtype, os.path.join(OUT, f"{model}_{outtype}.gguf"))
    # gpt-oss as the hub ships it (MXFP4 experts): the converter repacks the blocks into GGML's MXFP4 and
    # writes everything else as asked (f32: the fixture's bf16 weights exactly).
    convert("gpt_oss_mxfp4", "f32", os.path.join(OUT, "gpt_oss_mxfp4_f32.gguf"))
    legacy_per_expert(os.path.join(OUT, "mixtral_q8_0.gguf"), os.path.join(OUT, "mixtral_legacy_q8_0.gguf"))
    for model in ("qwen3_moe", "mixtral"):
        q8_0_reference(model, os.path.join(OUT, f"{model}_q8_0.gguf"), os.path.join(OUT, f"{model}_q8_0_expected.json"))
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))


if __name__ == "__main__":
    main()
