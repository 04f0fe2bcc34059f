"""Models, policies and adapters as both replay and the trainers see them.

Samplers load a base model and an adapter and name the policy that sampled; the trainers
load the same base model, write adapters and compare policy names. Neither side owns
these, so they live here, and this package imports no trainer and nothing of
`training.replay`:

- `known`: known base models by name (`resolve_model`, `fetch_model`, `KNOWN_MODELS`);
- `policies`: what `trajectories.policy` records (`policy_name`, `adapter_label`);
- `adapters`: an adapter folder's files and run record, `check_adapter_files`,
  `peft_wrapping`;
- `precision`: the dtype a sampler loads in (`sampling_dtype`), and whether this CPU
  multiplies it in hardware (`cpu_multiplies_natively`).
"""
