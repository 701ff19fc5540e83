"""The seed's Python executor: sentence-transformers' all-MiniLM-L6-v2 in a
Jina Executor (the "GPU Executor" tutorial), loaded from the local model
folder so the benchmark needs no network."""
from docarray import DocList
from docarray.documents import TextDoc
from jina import Executor, requests
from sentence_transformers import SentenceTransformer
import torch


class MyGPUExec(Executor):
    def __init__(self, device: str = 'cpu', model_path: str = '', dtype: str = 'float32', *args,
                 **kwargs):
        super().__init__(*args, **kwargs)
        # bfloat16 as sentence-transformers documents it: the model's weights
        # loaded in that dtype (model_kwargs torch_dtype).
        self.encoder = SentenceTransformer(model_path, device=device,
                                           model_kwargs={'torch_dtype': getattr(torch, dtype)})

    @requests(on='/encode')
    def encode(self, docs: DocList[TextDoc], **kwargs) -> DocList[TextDoc]:
        with torch.inference_mode():
            embeddings = self.encoder.encode(docs.text, batch_size=32, convert_to_tensor=True)
        docs.embedding = embeddings.float().cpu().numpy()
        return docs
