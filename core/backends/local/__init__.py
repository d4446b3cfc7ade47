"""The local backend: :class:`~framewise.core.backends.local.engine.Engine` answers with
transformers and Framewise's CUDA graphs on this machine; its settings switch all or nothing
(:mod:`.settings_transaction`). Importing :mod:`.engine` imports torch and transformers."""
