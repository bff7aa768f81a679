"""``kern-gen dspark``: a target manifest with a DSpark draft in it (docs/dspark.md, issue 15).

Modules: :mod:`.spec` (the draft's ``dspark.json``), :mod:`.names` (its weights, states,
renaming of target layer names), :mod:`.taps` (tap GEMMs into ``carry``), :mod:`.draft` (the
``draft`` and ``draft_precompute`` programs), :mod:`.programs` (all eight, in order),
:mod:`.generate` (the llama pipeline with the draft), :mod:`.command` (the CLI).
"""
