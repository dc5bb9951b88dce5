"""The Hugging Face modeling code that `lit_resformer.export` copies into every non-vanilla exported folder.

Both modules import only torch and transformers (never lit_resformer), so the folder they end up in loads with
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` where this project is not installed.
"""
