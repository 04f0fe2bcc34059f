"""Erasure: `trajlake forget` and retention, one module per step.

- `plan`: which rows a selection (a user, a session, a trace, a SQL condition, an age)
  reaches, across every table derived from the conversations, and the ids no file may
  hold afterwards (`ErasureSelection`, `plan_erasure`); planning only reads;
- `retention`: how long production data stays (`RetentionConfig`, `[retention]`);
- `apply`: carrying a plan out, the rows deleted and every older copy of them purged
  from the Delta history, with the plan kept under `<lake>/_erasure/` until it is done
  (`delete_all`, `purge_all`, `pending_plans`);
- `verify`: every file under the lake searched for every erased value in every spelling
  the lake's writers use (`verify_erased`, `files_holding`).

`flows.stages.forget` runs the three in that order. The names below are the package's
surface; each module documents its own step.

The package imports nothing (its modules load what they use: importing one of them, or
reading a section's settings, does not load the rest); each name is imported from its
module, e.g. `from store.erasure.plan import plan_erasure`.
"""
