"""The seed job with Jina's own Python client: 10,000 TextDocs posted with
request_size 32 to a gateway (Jina's or Gantry's) on 127.0.0.1:PORT. Prints
one JSON line (median of --jobs jobs after one warm-up job)."""
import argparse
import json
import statistics
import time

from docarray import DocList
from docarray.documents import TextDoc
from jina import Client


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--label', required=True)
    parser.add_argument('--jobs', type=int, default=3)
    parser.add_argument('--docs', type=int, default=10000)
    parser.add_argument('--request-size', type=int, default=32)
    args = parser.parse_args()
    client = Client(host='127.0.0.1', port=args.port, protocol='grpc')
    docs = DocList[TextDoc](
        [TextDoc(text=f'benchmark document number {i}') for i in range(args.docs)]
    )
    durations = []
    for job in range(args.jobs + 1):
        t0 = time.perf_counter()
        out = client.post('/default', docs, request_size=args.request_size,
                          return_type=DocList[TextDoc])
        elapsed = time.perf_counter() - t0
        if len(out) != args.docs:
            raise SystemExit(f'got {len(out)} docs back, sent {args.docs}')
        if job > 0:
            durations.append(elapsed)
    median = statistics.median(durations)
    print(json.dumps({
        'label': args.label, 'mode': 'jina_client_post', 'total_docs': args.docs,
        'request_size': args.request_size, 'jobs': len(durations), 'job_p50_s': median,
        'docs_per_s': args.docs / median,
    }))


if __name__ == '__main__':
    main()
