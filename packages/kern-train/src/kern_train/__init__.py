"""kern-train: trains the DSpark draft of a kern target (docs/dspark.md).

:mod:`kern_train.dspark` holds the pieces: ``config`` (``dspark.json``, the tap rule; no
torch), ``model`` / ``loss`` (the draft and its objective), ``prompts`` / ``data`` (prompts from
installable packages, greedy continuations by the target), ``train``, ``evaluate`` (offline τ),
``export`` (``draft.safetensors``) and ``random_init`` (seeded random weights, numpy only).
"""
