"""The vLLM backend: :class:`~framewise.core.backends.vllm.server.VllmServerEngine` samples the clip
here and asks a vLLM server over its OpenAI-compatible API, without torch. Its concerns, one module
each: the requests it sends (:mod:`.request`), whether the server can take them (:mod:`.fit`),
HTTP and streaming (:mod:`.http`), error messages (:mod:`.errors`), the server check
(:mod:`.check`), the server's metrics (:mod:`.metrics`), the serve command it shows
(:mod:`.serve_command`), API keys (:mod:`.keys`), and the model family the server runs
(:mod:`.family`, the one place that names it)."""
