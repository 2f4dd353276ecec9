"""MicroBatcher: many single-sequence calls -> few batched requests to the server.

verl's reward loop (>= 0.7) calls a manager's `run_single` once per sample, each as
its own coroutine; OpenRLHF calls its reward function once per query from a thread.
Sent one by one, each sample would be its own request and reach the GPU alone. The
batcher queues items and sends them together: a batch leaves when it holds
`max_batch` items or when `linger_s` has passed since its first item arrived,
whichever comes first. Up to `max_inflight` batches are in flight at once (each on
its own sender thread), so a slow batch does not stop the next one from filling.

    b = MicroBatcher(lambda inputs, extras: client.score_with_info(inputs, extras))
    fut = b.submit([1, 2, 3], {"ground_truth": "42"})     # concurrent.futures.Future
    score, components = fut.result()                      # float, {name: float}
    score, components = await b.score_async(ids, extra)   # from a coroutine

Each future resolves to (score, {component: value}) or raises the error of its own
item: when the server names the bad sequence of a batch (InvalidRequest and
friends carry bad_seq), only that item fails and the others are sent again;
any other error fails every item of the batch. Thread-safe; submit() never blocks
on the network. close() sends what is queued, then stops the sender threads; a
submit() after close() raises VerlRewardError (VR_ERR_CANCELLED).
"""

import asyncio
import concurrent.futures
import threading
import time

from .errors import STATUS_VALUES, VerlRewardError

_CANCELLED = STATUS_VALUES["VR_ERR_CANCELLED"]


class MicroBatcher:
    """score_fn(inputs: list, extras: list|None) -> ScoreResult, called from sender threads.

    max_batch: most items per request (the server's --max-seqs-per-request caps it
    too). linger_s: longest wait for more items after the first one of a batch
    arrived. max_inflight: batches in flight at once (sender threads)."""

    def __init__(self, score_fn, max_batch=256, linger_s=0.002, max_inflight=4, name="verl-reward-batch"):
        if int(max_batch) < 1:
            raise ValueError("max_batch must be >= 1, got %r" % (max_batch,))
        if float(linger_s) < 0:
            raise ValueError("linger_s must be >= 0, got %r" % (linger_s,))
        if int(max_inflight) < 1:
            raise ValueError("max_inflight must be >= 1, got %r" % (max_inflight,))
        self._score_fn = score_fn
        self.max_batch = int(max_batch)
        self.linger_s = float(linger_s)
        self._cond = threading.Condition()
        self._queue = []            # [(input, extra, future, t_enqueued)]
        self._closed = False
        self.batches_sent = 0       # requests made (for tests and logs)
        self.items_sent = 0
        self._threads = [threading.Thread(target=self._run, name="%s-%d" % (name, i), daemon=True)
                         for i in range(int(max_inflight))]
        for t in self._threads:
            t.start()

    def submit(self, item, extra=None):
        """Queues one sequence (token ids, or whatever score_fn takes as one input)
        -> Future of (score, components)."""
        fut = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                raise VerlRewardError(_CANCELLED, "MicroBatcher is closed")
            self._queue.append((item, extra, fut, time.monotonic()))
            if len(self._queue) == 1 or len(self._queue) >= self.max_batch:
                self._cond.notify()
        return fut

    async def score_async(self, item, extra=None):
        """await -> (score, components). No thread per call, and one wake-up of the event
        loop per batch (not per item): the sender thread hands a batch's results to the
        loop in one call_soon_threadsafe."""
        loop = asyncio.get_running_loop()
        sink = _AsyncSink(loop, loop.create_future())
        with self._cond:
            if self._closed:
                raise VerlRewardError(_CANCELLED, "MicroBatcher is closed")
            self._queue.append((item, extra, sink, time.monotonic()))
            if len(self._queue) == 1 or len(self._queue) >= self.max_batch:
                self._cond.notify()
        return await sink.fut

    def _take(self):
        """Waits for a batch to be due; None once closed and drained."""
        with self._cond:
            while True:
                if self._queue:
                    due = self._queue[0][3] + self.linger_s
                    now = time.monotonic()
                    if len(self._queue) >= self.max_batch or now >= due or self._closed:
                        batch = self._queue[:self.max_batch]
                        del self._queue[:self.max_batch]
                        if self._queue:
                            self._cond.notify()     # another sender may take the rest
                        return batch
                    self._cond.wait(due - now)
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _run(self):
        while True:
            batch = self._take()
            if batch is None:
                return
            self._send(batch)

    def _send(self, batch):
        live = [b for b in batch if _start(b[2])]
        done = []                  # (sink, ok, value), delivered together at the end
        while live:
            inputs = [b[0] for b in live]
            extras = [b[1] for b in live]
            if all(e is None for e in extras):
                extras = None
            try:
                res = self._score_fn(inputs, extras)
            except VerlRewardError as e:
                bad = getattr(e, "bad_seq", -1)
                if isinstance(bad, int) and 0 <= bad < len(live) and len(live) > 1:
                    done.append((live[bad][2], False, e))       # only the named item fails
                    live = live[:bad] + live[bad + 1:]
                    continue
                done.extend((b[2], False, e) for b in live)
                break
            except BaseException as e:     # a bug in score_fn must not kill the sender thread
                done.extend((b[2], False, e) for b in live)
                break
            n = len(live)
            if len(res.scores) != n:
                err = VerlRewardError(STATUS_VALUES["VR_ERR_MALFORMED"],
                                      "%d scores for a batch of %d" % (len(res.scores), n))
                done.extend((b[2], False, err) for b in live)
                break
            with self._cond:
                self.batches_sent += 1
                self.items_sent += n
            done.extend((b[2], True, (res.scores[i], {k: v[i] for k, v in res.components.items()}))
                        for i, b in enumerate(live))
            break
        _deliver(done)

    def close(self):
        """Stops the sender threads after the queued items were sent (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _AsyncSink:
    """Where an awaiting coroutine's result goes: an asyncio future of `loop`."""
    __slots__ = ("loop", "fut")

    def __init__(self, loop, fut):
        self.loop = loop
        self.fut = fut


def _start(sink):
    """False when the caller gave up (cancelled) before the item was sent."""
    if isinstance(sink, _AsyncSink):
        return not sink.fut.cancelled()
    return sink.set_running_or_notify_cancel()


def _set_all(pairs):
    for fut, ok, value in pairs:
        if not fut.done():
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


def _deliver(done):
    by_loop = {}
    for sink, ok, value in done:
        if isinstance(sink, _AsyncSink):
            by_loop.setdefault(sink.loop, []).append((sink.fut, ok, value))
        elif ok:
            sink.set_result(value)
        else:
            sink.set_exception(value)
    for loop, pairs in by_loop.items():
        try:
            loop.call_soon_threadsafe(_set_all, pairs)
        except RuntimeError:       # the loop was closed meanwhile: nobody waits any more
            pass
