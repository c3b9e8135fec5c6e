/* transport.c — blocking primitives built from the non-blocking ones. */
#include "transport/transport.h"

gcclResult_t tp_waitall(struct transport* tp, const tp_req* reqs, int n) {
  gcclResult_t first = gcclSuccess;
  for (int i = 0; i < n; i++) {
    gcclResult_t r = tp->ops->wait(tp, reqs[i]);
    if (first == gcclSuccess) first = r;
  }
  return first;
}

gcclResult_t tp_send(struct transport* tp, int peer, const void* buf, size_t bytes) {
  tp_req req;
  gcclResult_t r = tp->ops->isend(tp, peer, buf, bytes, &req);
  return r != gcclSuccess ? r : tp->ops->wait(tp, req);
}

gcclResult_t tp_recv(struct transport* tp, int peer, void* buf, size_t bytes) {
  tp_req req;
  gcclResult_t r = tp->ops->irecv(tp, peer, buf, bytes, &req);
  return r != gcclSuccess ? r : tp->ops->wait(tp, req);
}

gcclResult_t tp_sendrecv(struct transport* tp, int to, const void* sbuf, size_t sbytes, int from, void* rbuf,
                         size_t rbytes) {
  tp_req reqs[2];
  gcclResult_t r = tp->ops->irecv(tp, from, rbuf, rbytes, &reqs[0]);
  if (r != gcclSuccess) return r;
  r = tp->ops->isend(tp, to, sbuf, sbytes, &reqs[1]);
  if (r != gcclSuccess) return r; /* the caller's cancel_all withdraws reqs[0] */
  return tp_waitall(tp, reqs, 2);
}
