"""The one chat rendering: lake messages to a chat template's text and token ids.

Replay (prompts, tool-result suffixes, `serve-sampler`, the vLLM server's template) and the
trainers (SFT's tokenisation, GRPO, the tokenizer saved beside every adapter) both render
through here, so what is trained is what is sampled. Neither side owns it: this package
imports no trainer and nothing of `training.replay`.

- `templates`: which chat template a tokenizer renders with (`chat_template_for`, the
  tool-aware ChatML one for models whose own ignores tools), `ChatTemplateError`;
- `render`: `ChatRenderer` (token-level rendering), `template_messages`, `parse_tools`.
"""
