"""fp16 optimizer epilogue: Megatron's Float16OptimizerWithFloat16Params kernels, bytes by hand.

Source: NVIDIA/Megatron-LM megatron/optimizer/optimizer.py ``Float16OptimizerWithFloat16Params
.step`` and megatron/optimizer/clip_grads.py at commit 6985e58938d40ad91ac07b0fddcfad8132e1447e
(the SC'21 Table 1 scripts' commit). Per updated parameter:
  copy fp16 grad -> fp32 main grad (``.float()``)   read 2, write 4      =  6
  unscale + inf check (in place, fp32)              read 4, write 4      =  8
  grad norm over fp32 main grads (l2norm)           read 4               =  4
  apex FusedAdam on fp32 main params                read g,p,m,v; write p,m,v: 7 x 4 = 28
  fp32 -> fp16 parameter copy                       read 4, write 2      =  6
                                                                    total 52
plus zeroing the fp16 gradient buffer: 2 per local parameter -> 54 per parameter (non-distributed).
"""

from sim.models.optimizer import adam_ops, grad_bytes
from sim.models.plan import build_model_plan
from sim.models.vocab.spec import load_model
from sim.validation.cases import load_cases


def _bytes(ops):
    return {op.name: op.bytes for op in ops}


def test_fp16_epilogue_kernels_and_bytes():
    got = _bytes(adam_ops(1000, 1, False, grad_bytes("fp16"), fp16=True))
    assert got == {
        "copy_model_grads_to_main_grads": 6000,
        "unscale_and_check_inf": 8000,
        "grad_norm": 4000,
        "adam_step": 28000,
        "copy_main_params_to_model_params": 6000,
        "zero_grad_buffer": 2000,
    }


def test_fp16_distributed_updates_a_shard_but_zeroes_all():
    got = _bytes(adam_ops(1000, 4, True, 2, fp16=True))  # 250 updated parameters
    assert sum(got.values()) == 52 * 250 + 2 * 1000


def test_bf16_grads_in_bf16_keep_the_plain_epilogue():
    # --grad-reduce-in-bf16: 2-byte bf16 main grads, no fp16 optimizer kernels: 2 + 28 + 2
    assert sum(_bytes(adam_ops(1000, 1, False, grad_bytes("bf16", True))).values()) == 32000


def test_bf16_epilogue_unchanged():
    # fp32 main grads (4 bytes): norm 4, Adam 4 + 26, zero 4 -> 38 per parameter
    assert sum(_bytes(adam_ops(1000, 1, False, grad_bytes("bf16"))).values()) == 38000


def test_sc21_1p7b_stage_epilogue_bytes():
    # GPT 1.7B (h 2304, 24 layers, V 51200, s 2048): 24·(12h² + 13h) + V·h + s·h + 2h
    h = 2304
    params = 24 * (12 * h * h + 13 * h) + 51200 * h + 2048 * h + 2 * h
    assert params == 1_652_230_656
    _, cases = load_cases("workloads/validation/narayanan2021-selene.yaml")
    case = next(c for c in cases if c.name == "SC'21 1.7B 32 GPUs")
    par = case.par
    assert par.dtype == "fp16" and not par.shards_optimizer
    st = build_model_plan(load_model(case.model_path), par).stages[0]
    assert st.params == params
    ops = adam_ops(st.params, par.dp_cp, par.shards_optimizer, grad_bytes(par.dtype),
                   par.dtype == "fp16")
    assert sum(op.bytes for op in ops) == 54 * params
