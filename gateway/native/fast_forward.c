/* hearth_fast_forward: a streamed answer's plain content relayed between the engine's socket and the client's in C,
 * with no Python per chunk (issue 35; gateway/fast_forward.py hands streams to it and takes them back).
 *
 * A ``Stream`` is made at a chunk boundary of the engine's chunked answer, between two events, once its first token
 * went by. The event loop calls its ``pump`` when the engine's socket is readable and its ``client_event`` when the
 * client's is (gateway.fast_forward registers both with ``loop.add_reader``): no thread, no lock, all in the loop's
 * thread with the GIL held. Each read from the engine is cut into its whole chunks; while every chunk holds whole chat
 * events of content deltas only (``plain_events``, the same test as gateway.sse.plain_events), their data go to the
 * client as one chunk of the client's chunked answer, one send. Anything else ends the stream here, and its
 * ``on_end`` is called, with the engine's bytes not relayed (from the first chunk that is not plain, or a chunk not
 * whole yet) and the client's bytes not sent kept for ``take``:
 *   NOT_PLAIN      a chunk that is not plain content: [DONE], usage, a finish, an error, tool calls, the last chunk
 *   ENGINE_CLOSED  the engine closed its connection, or reading it failed
 *   CLIENT_EVENT   the client sent something, closed its side, or its connection failed
 *   CLIENT_SLOW    the client's socket took part of a send or none of it
 *   TAKEN          Python took it back (``take`` before it ended: a silence, the stream's end elsewhere)
 * Both sockets are dup()ed, so that the loop's readers are the stream's own and a close on Python's side never
 * lets their numbers be reused under it; ``take`` closes the dups. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { RUNNING, NOT_PLAIN, ENGINE_CLOSED, CLIENT_EVENT, CLIENT_SLOW, TAKEN };
enum { READ_MAX = 65536, HELD_MAX = 4 * READ_MAX, HEAD_ROOM = 24 };

typedef struct {
    PyObject_HEAD
    int engine, client; /* dups of Python's sockets; -1 once taken */
    int reason;         /* RUNNING while relayed here */
    char *held;         /* engine bytes not relayed: a chunk not whole yet, or, once ended, all not relayed */
    size_t held_len;
    char *unsent; /* client bytes not sent, once ended CLIENT_SLOW */
    size_t unsent_len;
    unsigned long long events, body_bytes; /* relayed: events, and their bytes without the chunk framing */
    double last_read, last_write;          /* CLOCK_MONOTONIC seconds, as Python's time.monotonic */
    PyObject *on_end;                      /* called once, with no arguments, when the stream ends here */
} Stream;

/* One read's bytes and one send's, shared by every stream: only ever used in a call that holds the GIL. */
static char *read_buffer, *write_buffer;
static size_t read_cap, write_cap;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Occurrences of ``needle`` in data[0..len). */
static size_t count(const char *data, size_t len, const char *needle) {
    size_t n = 0, size = strlen(needle);
    const char *at = data, *end = data + len;
    while ((at = memmem(at, (size_t)(end - at), needle, size)) != NULL) {
        n++;
        at += size;
    }
    return n;
}

static int has(const char *data, size_t len, const char *needle) {
    return memmem(data, len, needle, strlen(needle)) != NULL;
}

/* gateway.sse.plain_events, byte for byte: how many events ``data`` holds when it is whole chat events of one
 * ``data:`` line each with LF line ends, no error and content deltas only; 0 for anything else. */
static size_t plain_events(const char *data, size_t len) {
    if (len < 7 || memcmp(data, "data:", 5) != 0 || data[len - 2] != '\n' || data[len - 1] != '\n')
        return 0;
    size_t events = count(data, len, "\n\ndata:") + 1;
    if (count(data, len, "\n") != 2 * events || memchr(data, '\r', len) != NULL)
        return 0;
    if (has(data, len, "\"error\"") || has(data, len, "\\u") || has(data, len, "\"usage\"") ||
        has(data, len, "[DONE]"))
        return 0;
    size_t finishes = count(data, len, "\"finish_reason\"");
    if (finishes != count(data, len, "\"finish_reason\":null") + count(data, len, "\"finish_reason\": null"))
        return 0;
    if (!has(data, len, "\"reasoning") && !has(data, len, "\"tool_calls\""))
        return events;
    size_t reasoning = count(data, len, "\"reasoning\":null") + count(data, len, "\"reasoning_content\":null");
    if (count(data, len, "\"reasoning") != reasoning)
        return 0;
    return count(data, len, "\"tool_calls\"") == count(data, len, "\"tool_calls\":null") ? events : 0;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int grow(char **buffer, size_t *cap, size_t need) {
    if (need <= *cap)
        return 0;
    size_t size = need < 2 * *cap ? 2 * *cap : need;
    char *bigger = realloc(*buffer, size);
    if (bigger == NULL)
        return -1;
    *buffer = bigger, *cap = size;
    return 0;
}

static int keep(char **to, size_t *to_len, const char *from, size_t len) {
    free(*to);
    *to = NULL, *to_len = 0;
    if (len == 0)
        return 0;
    if ((*to = malloc(len)) == NULL)
        return -1;
    memcpy(*to, from, len);
    *to_len = len;
    return 0;
}

/* Whole chunks of ``data`` (the engine's bytes from a chunk boundary on) relayed while plain; returns the offset
 * of the first byte not relayed, and sets *stop to NOT_PLAIN at a chunk that must go to Python. */
static size_t relay_chunks(Stream *s, const char *data, size_t len, int *stop) {
    size_t at = 0, body = 0, events = 0;
    char *out = write_buffer + HEAD_ROOM; /* room before the body for its chunk size line */
    while (at < len) {
        const char *line_end = memmem(data + at, len - at, "\r\n", 2);
        if (line_end == NULL)
            break;
        size_t size = 0;
        const char *digit = data + at;
        for (; digit < line_end && digit - (data + at) < 8; digit++) {
            int value = hex_value(*digit);
            if (value < 0)
                break;
            size = size * 16 + (size_t)value;
        }
        if (digit != line_end || digit == data + at || size == 0) {
            *stop = NOT_PLAIN; /* the last chunk, a chunk extension, or what Python's parser will refuse */
            break;
        }
        size_t start = (size_t)(line_end - data) + 2;
        if (len - start < size + 2)
            break; /* not whole yet */
        if (memcmp(data + start + size, "\r\n", 2) != 0) {
            *stop = NOT_PLAIN;
            break;
        }
        size_t found = plain_events(data + start, size);
        if (found == 0) {
            *stop = NOT_PLAIN;
            break;
        }
        memcpy(out + body, data + start, size);
        body += size, events += found;
        at = start + size + 2;
    }
    if (body == 0)
        return at;
    char head[HEAD_ROOM];
    int head_len = snprintf(head, sizeof head, "%zx\r\n", body);
    char *frame = out - head_len;
    memcpy(frame, head, (size_t)head_len);
    memcpy(out + body, "\r\n", 2);
    size_t frame_len = (size_t)head_len + body + 2;
    ssize_t sent = send(s->client, frame, frame_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        *stop = CLIENT_EVENT; /* gone: Python reads its side and finds out */
        return at;
    }
    s->events += events, s->body_bytes += body;
    s->last_write = now();
    if ((size_t)(sent < 0 ? 0 : sent) < frame_len) {
        size_t done = sent < 0 ? 0 : (size_t)sent;
        if (keep(&s->unsent, &s->unsent_len, frame + done, frame_len - done) != 0)
            *stop = CLIENT_EVENT;
        else if (*stop == RUNNING)
            *stop = CLIENT_SLOW;
    }
    return at;
}

/* The stream ends here: ``on_end`` called (it takes the stream back). NULL when it raised. */
static PyObject *end(Stream *s, int reason) {
    s->reason = reason;
    PyObject *result = PyObject_CallNoArgs(s->on_end);
    if (result == NULL)
        return NULL;
    Py_DECREF(result);
    Py_RETURN_NONE;
}

static PyObject *Stream_pump(Stream *s, PyObject *unused) {
    if (s->reason != RUNNING)
        Py_RETURN_NONE;
    if (grow(&read_buffer, &read_cap, s->held_len + READ_MAX) != 0 ||
        grow(&write_buffer, &write_cap, s->held_len + READ_MAX + HEAD_ROOM + 2) != 0)
        return end(s, ENGINE_CLOSED);
    char *data = read_buffer;
    if (s->held_len > 0) /* a chunk not whole yet, in front of the new bytes */
        memcpy(data, s->held, s->held_len);
    ssize_t got = recv(s->engine, data + s->held_len, READ_MAX, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        Py_RETURN_NONE;
    if (got <= 0)
        return end(s, ENGINE_CLOSED); /* held goes back as it is: Python's parser has not seen it */
    size_t len = s->held_len + (size_t)got;
    s->last_read = now();
    int stop = RUNNING;
    size_t at = relay_chunks(s, data, len, &stop);
    if (keep(&s->held, &s->held_len, data + at, len - at) != 0)
        stop = ENGINE_CLOSED;
    else if (stop == RUNNING && s->held_len > HELD_MAX)
        stop = NOT_PLAIN; /* a chunk larger than any content delta: Python relays it */
    if (stop != RUNNING)
        return end(s, stop);
    Py_RETURN_NONE;
}

static PyObject *Stream_client_event(Stream *s, PyObject *unused) {
    if (s->reason != RUNNING)
        Py_RETURN_NONE;
    return end(s, CLIENT_EVENT);
}

static PyObject *Stream_seen(Stream *s, PyObject *unused) {
    return Py_BuildValue("(KKdd)", s->events, s->body_bytes, s->last_read, s->last_write);
}

static void close_sockets(Stream *s) {
    if (s->engine >= 0)
        close(s->engine);
    if (s->client >= 0)
        close(s->client);
    s->engine = s->client = -1;
}

static PyObject *Stream_take(Stream *s, PyObject *unused) {
    if (s->engine < 0)
        Py_RETURN_NONE;
    if (s->reason == RUNNING)
        s->reason = TAKEN;
    close_sockets(s);
    Py_CLEAR(s->on_end);
    PyObject *back = Py_BuildValue("(iy#y#KKdd)", s->reason, s->held ? s->held : "", (Py_ssize_t)s->held_len,
                                   s->unsent ? s->unsent : "", (Py_ssize_t)s->unsent_len, s->events, s->body_bytes,
                                   s->last_read, s->last_write);
    keep(&s->held, &s->held_len, NULL, 0);
    keep(&s->unsent, &s->unsent_len, NULL, 0);
    return back;
}

static int Stream_init(Stream *s, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"engine_fd", "client_fd", "on_end", NULL};
    int engine_fd, client_fd;
    PyObject *on_end;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiO", names, &engine_fd, &client_fd, &on_end))
        return -1;
    close_sockets(s);
    s->engine = fcntl(engine_fd, F_DUPFD_CLOEXEC, 0);
    s->client = fcntl(client_fd, F_DUPFD_CLOEXEC, 0);
    if (s->engine < 0 || s->client < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        close_sockets(s);
        return -1;
    }
    Py_XSETREF(s->on_end, Py_NewRef(on_end));
    s->last_read = s->last_write = now();
    return 0;
}

static PyObject *Stream_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Stream *s = (Stream *)type->tp_alloc(type, 0);
    if (s != NULL)
        s->engine = s->client = -1;
    return (PyObject *)s;
}

static int Stream_traverse(Stream *s, visitproc visit, void *arg) {
    Py_VISIT(s->on_end);
    return 0;
}

static int Stream_clear(Stream *s) {
    Py_CLEAR(s->on_end);
    return 0;
}

static void Stream_dealloc(Stream *s) {
    PyObject_GC_UnTrack(s);
    Stream_clear(s);
    close_sockets(s);
    free(s->held);
    free(s->unsent);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Stream_engine_fd(Stream *s, void *closure) { return PyLong_FromLong(s->engine); }

static PyObject *Stream_client_fd(Stream *s, void *closure) { return PyLong_FromLong(s->client); }

static PyObject *module_plain_events(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    size_t events = plain_events(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(events);
}

static PyMethodDef Stream_methods[] = {
    {"pump", (PyCFunction)Stream_pump, METH_NOARGS, "pump(): the engine's socket is readable: relay what it holds."},
    {"client_event", (PyCFunction)Stream_client_event, METH_NOARGS,
     "client_event(): the client's socket is readable (it sent something or closed): the stream ends here."},
    {"seen", (PyCFunction)Stream_seen, METH_NOARGS, "seen() -> (events, body_bytes, last_read, last_write)."},
    {"take", (PyCFunction)Stream_take, METH_NOARGS,
     "take() -> (reason, held, unsent, events, body_bytes, last_read, last_write) | None: the stream back, its "
     "sockets' dups closed; None after the first call."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Stream_getset[] = {
    {"engine_fd", (getter)Stream_engine_fd, NULL, "The dup of the engine's socket the loop reads for it.", NULL},
    {"client_fd", (getter)Stream_client_fd, NULL, "The dup of the client's socket it sends on.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hearth_fast_forward.Stream",
    .tp_basicsize = sizeof(Stream),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Stream(engine_fd, client_fd, on_end): one stream relayed here while its content is plain.",
    .tp_new = Stream_new,
    .tp_init = (initproc)Stream_init,
    .tp_dealloc = (destructor)Stream_dealloc,
    .tp_traverse = (traverseproc)Stream_traverse,
    .tp_clear = (inquiry)Stream_clear,
    .tp_methods = Stream_methods,
    .tp_getset = Stream_getset,
};

static PyMethodDef module_methods[] = {
    {"plain_events", module_plain_events, METH_O, "plain_events(data) -> int: gateway.sse.plain_events in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hearth_fast_forward", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_hearth_fast_forward(void) {
    if (PyType_Ready(&StreamType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Stream", (PyObject *)&StreamType) < 0)
        return NULL;
    PyModule_AddIntConstant(m, "NOT_PLAIN", NOT_PLAIN);
    PyModule_AddIntConstant(m, "ENGINE_CLOSED", ENGINE_CLOSED);
    PyModule_AddIntConstant(m, "CLIENT_EVENT", CLIENT_EVENT);
    PyModule_AddIntConstant(m, "CLIENT_SLOW", CLIENT_SLOW);
    PyModule_AddIntConstant(m, "TAKEN", TAKEN);
    return m;
}
