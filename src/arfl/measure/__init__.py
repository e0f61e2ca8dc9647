"""What measures a run: the merger (first copy wins, latency per result, divergence, the
HdrHistogram interval log) and the histogram helpers the report reads it back with."""
