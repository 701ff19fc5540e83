"""NoOpExec for Jina: the Python twin of executors/noop (docs come back untouched)."""
from docarray import DocList
from docarray.documents import TextDoc
from jina import Executor, requests


class NoOpExec(Executor):
    @requests
    def noop(self, docs: DocList[TextDoc], **kwargs) -> DocList[TextDoc]:
        return docs
