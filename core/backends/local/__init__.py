"""The local backend: :class:`~framewise.core.backends.local.engine.Engine` answers with
transformers and Framewise's CUDA graphs on this machine. It composes the model parts it answers
with (:mod:`.parts`), the clip encoder (:mod:`.clip_encoder`), the answerer (:mod:`.answerer`) and
the settings transaction that switches them all or nothing (:mod:`.transaction`). Importing
:mod:`.engine` imports torch and transformers."""
