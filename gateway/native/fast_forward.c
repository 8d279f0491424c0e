/* hearth_fast_forward: a streamed answer's plain content relayed between the engine's socket and the client's by a
 * thread of its own, with no Python per chunk (issue 35; gateway/fast_forward.py hands streams to it and takes them
 * back).
 *
 * A stream is handed over at a chunk boundary of the engine's chunked answer, between two events, once its first
 * token went by. Each read from the engine is cut into its whole chunks; while every chunk holds whole chat events
 * of content deltas only (``plain_events``, the same test as gateway.sse.plain_events), their data go to the client
 * as one chunk of the client's chunked answer, one send. Anything else ends the hand-over and gives the stream back
 * to Python, with the engine's bytes not relayed (from the first chunk that is not plain, or a chunk not whole yet)
 * and the client's bytes not sent:
 *   NOT_PLAIN      a chunk that is not plain content: [DONE], usage, a finish, an error, tool calls, the last chunk
 *   ENGINE_CLOSED  the engine closed its connection, or reading it failed
 *   CLIENT_EVENT   the client closed its side or its connection failed
 *   CLIENT_SLOW    the client's socket took part of a send or none of it
 *   SILENT         no byte from the engine for the stream's ``silence`` seconds (keep-alives are Python's)
 *   TAKEN          Python took it back (``take`` before it ended)
 * Both sockets are dup()ed when handed over, so a close on Python's side never lets their numbers be reused under
 * this thread; the dups close when Python takes the stream. A stream ended here is listed by ``exited`` (the
 * object's file descriptor, an eventfd, turns readable) until Python takes it. One mutex guards the streams:
 * this thread holds it while it handles one event, Python while it adds, peeks or takes one. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { RUNNING, NOT_PLAIN, ENGINE_CLOSED, CLIENT_EVENT, CLIENT_SLOW, SILENT, TAKEN };
enum { READ_MAX = 65536, HELD_MAX = 4 * READ_MAX, EVENTS_MAX = 256, SLOT_BITS = 20, HEAD_ROOM = 24 };
#define CONTROL_TAG UINT64_MAX

typedef struct {
    uint64_t id;
    int engine, client; /* dups of Python's sockets */
    int reason;         /* RUNNING while relayed here */
    char *held;         /* engine bytes not relayed: a chunk not whole yet, or, once ended, all not relayed */
    size_t held_len;
    char *unsent; /* client bytes not sent, once ended CLIENT_SLOW */
    size_t unsent_len;
    unsigned long long events, body_bytes; /* relayed: events, and their bytes without the chunk framing */
    double silence, last_read, last_write; /* seconds; CLOCK_MONOTONIC, as Python's time.monotonic */
} Stream;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_t thread;
    int started, stopping, wake; /* wake: a stream ended since Python was last woken */
    int epoll, exits, control; /* epoll, the exits' eventfd, the stop eventfd */
    Stream **slots;
    size_t slot_count;
    uint64_t next_id;
    uint64_t *exited;
    size_t exited_len, exited_cap;
    char *read_buffer, *write_buffer;
    size_t read_cap, write_cap;
    double last_scan;
} FastForward;

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

/* The stream ends here: no more events for it, listed for Python. Called with the lock held. */
static void end(FastForward *self, Stream *s, int reason) {
    s->reason = reason;
    if (self->exited_len == 0)
        self->wake = 1;
    epoll_ctl(self->epoll, EPOLL_CTL_DEL, s->engine, NULL);
    epoll_ctl(self->epoll, EPOLL_CTL_DEL, s->client, NULL);
    if (grow((char **)&self->exited, &self->exited_cap, (self->exited_len + 1) * sizeof(uint64_t)) == 0)
        self->exited[self->exited_len++] = s->id;
}

/* Whole chunks of ``data`` (the engine's bytes from a chunk boundary on) relayed while plain; returns the offset
 * of the first byte not relayed, and sets *stop to NOT_PLAIN at a chunk that must go to Python. */
static size_t relay_chunks(FastForward *self, Stream *s, const char *data, size_t len, int *stop) {
    size_t at = 0, body = 0, events = 0;
    char *out = self->write_buffer + HEAD_ROOM; /* room before the body for its chunk size line */
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

static void engine_readable(FastForward *self, Stream *s) {
    if (grow(&self->read_buffer, &self->read_cap, s->held_len + READ_MAX) != 0 ||
        grow(&self->write_buffer, &self->write_cap, s->held_len + READ_MAX + HEAD_ROOM + 2) != 0) {
        end(self, s, ENGINE_CLOSED);
        return;
    }
    char *data = self->read_buffer;
    memcpy(data, s->held, s->held_len);
    ssize_t got = recv(s->engine, data + s->held_len, READ_MAX, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (got <= 0) {
        end(self, s, ENGINE_CLOSED); /* held goes back as it is: Python's parser has not seen it */
        return;
    }
    size_t len = s->held_len + (size_t)got;
    s->last_read = now();
    int stop = RUNNING;
    size_t at = relay_chunks(self, s, data, len, &stop);
    if (keep(&s->held, &s->held_len, data + at, len - at) != 0)
        stop = ENGINE_CLOSED;
    else if (stop == RUNNING && s->held_len > HELD_MAX)
        stop = NOT_PLAIN; /* a chunk larger than any content delta: Python relays it */
    if (stop != RUNNING)
        end(self, s, stop);
}

static Stream *find(FastForward *self, uint64_t id) {
    size_t slot = (size_t)(id & ((1u << SLOT_BITS) - 1));
    if (slot >= self->slot_count || self->slots[slot] == NULL || self->slots[slot]->id != id)
        return NULL;
    return self->slots[slot];
}

/* Wakes Python's reader of ``exits`` when a stream ended since the last look (called without the lock). */
static void wake_python(FastForward *self, int wake) {
    uint64_t one = 1;
    if (wake && write(self->exits, &one, sizeof one) < 0) { /* a full counter still wakes the reader */
    }
}

/* The thread: each event handled under the lock on its own, so that Python, adding or taking a stream, waits for one
 * read and send at most, never for a whole batch. */
static void *run(void *arg) {
    FastForward *self = arg;
    struct epoll_event events[EVENTS_MAX];
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals are the main thread's, where Python handles them */
    for (;;) {
        int n = epoll_wait(self->epoll, events, EVENTS_MAX, 50);
        for (int i = 0; i < n; i++) {
            uint64_t tag = events[i].data.u64;
            pthread_mutex_lock(&self->lock);
            Stream *s = tag == CONTROL_TAG ? NULL : find(self, tag >> 1);
            if (s != NULL && s->reason == RUNNING && (tag & 1))
                end(self, s, CLIENT_EVENT);
            else if (s != NULL && s->reason == RUNNING)
                engine_readable(self, s);
            int wake = self->wake;
            self->wake = 0;
            pthread_mutex_unlock(&self->lock);
            wake_python(self, wake);
        }
        pthread_mutex_lock(&self->lock);
        if (self->stopping) {
            pthread_mutex_unlock(&self->lock);
            return NULL;
        }
        double t = now();
        if (t - self->last_scan >= 0.05) {
            self->last_scan = t;
            for (size_t i = 0; i < self->slot_count; i++) {
                Stream *s = self->slots[i];
                if (s != NULL && s->reason == RUNNING && t - s->last_read >= s->silence)
                    end(self, s, SILENT);
            }
        }
        int wake = self->wake;
        self->wake = 0;
        pthread_mutex_unlock(&self->lock);
        wake_python(self, wake);
    }
}

static void forget(FastForward *self, Stream *s) {
    self->slots[s->id & ((1u << SLOT_BITS) - 1)] = NULL;
    close(s->engine);
    close(s->client);
    free(s->held);
    free(s->unsent);
    free(s);
}

static int FastForward_init(FastForward *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "", names))
        return -1;
    pthread_mutex_init(&self->lock, NULL);
    self->epoll = epoll_create1(EPOLL_CLOEXEC);
    self->exits = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->control = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    self->next_id = 1;
    self->last_scan = now();
    if (self->epoll < 0 || self->exits < 0 || self->control < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct epoll_event control = {.events = EPOLLIN, .data.u64 = CONTROL_TAG};
    epoll_ctl(self->epoll, EPOLL_CTL_ADD, self->control, &control);
    if (pthread_create(&self->thread, NULL, run, self) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the fast-forward thread");
        return -1;
    }
    self->started = 1;
    return 0;
}

static void stop_thread(FastForward *self) {
    if (!self->started)
        return;
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_mutex_unlock(&self->lock);
    uint64_t one = 1;
    if (write(self->control, &one, sizeof one) < 0) {
    }
    Py_BEGIN_ALLOW_THREADS;
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS;
    self->started = 0;
    for (size_t i = 0; i < self->slot_count; i++)
        if (self->slots[i] != NULL)
            forget(self, self->slots[i]);
}

static void FastForward_dealloc(FastForward *self) {
    stop_thread(self);
    if (self->epoll > 0)
        close(self->epoll);
    if (self->exits > 0)
        close(self->exits);
    if (self->control > 0)
        close(self->control);
    free(self->slots);
    free(self->exited);
    free(self->read_buffer);
    free(self->write_buffer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *FastForward_add(FastForward *self, PyObject *args) {
    int engine_fd, client_fd;
    double silence;
    if (!PyArg_ParseTuple(args, "iid", &engine_fd, &client_fd, &silence))
        return NULL;
    Stream *s = calloc(1, sizeof(Stream));
    if (s == NULL)
        return PyErr_NoMemory();
    s->engine = fcntl(engine_fd, F_DUPFD_CLOEXEC, 0);
    s->client = fcntl(client_fd, F_DUPFD_CLOEXEC, 0);
    s->silence = silence;
    s->last_read = s->last_write = now();
    pthread_mutex_lock(&self->lock);
    size_t slot = 0;
    while (slot < self->slot_count && self->slots[slot] != NULL)
        slot++;
    int failed = s->engine < 0 || s->client < 0 || slot >= (1u << SLOT_BITS) || !self->started;
    if (!failed && slot == self->slot_count) {
        size_t bytes = self->slot_count * sizeof(Stream *), cap = bytes;
        failed = grow((char **)&self->slots, &cap, bytes + 64 * sizeof(Stream *)) != 0;
        if (!failed) {
            memset(self->slots + self->slot_count, 0, 64 * sizeof(Stream *));
            self->slot_count += 64;
        }
    }
    if (!failed) {
        s->id = (self->next_id++ << SLOT_BITS) | slot;
        self->slots[slot] = s;
        struct epoll_event engine = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = s->id << 1};
        struct epoll_event client = {.events = EPOLLRDHUP, .data.u64 = (s->id << 1) | 1};
        failed = epoll_ctl(self->epoll, EPOLL_CTL_ADD, s->engine, &engine) != 0 ||
                 epoll_ctl(self->epoll, EPOLL_CTL_ADD, s->client, &client) != 0;
        if (failed) {
            epoll_ctl(self->epoll, EPOLL_CTL_DEL, s->engine, NULL);
            forget(self, s);
            s = NULL;
        }
    }
    pthread_mutex_unlock(&self->lock);
    if (failed) {
        if (s != NULL) {
            if (s->engine >= 0)
                close(s->engine);
            if (s->client >= 0)
                close(s->client);
            free(s);
        }
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong(s->id);
}

static PyObject *FastForward_exited(FastForward *self, PyObject *unused) {
    uint64_t counter;
    if (read(self->exits, &counter, sizeof counter) < 0 && errno != EAGAIN) {
    }
    pthread_mutex_lock(&self->lock);
    PyObject *ids = PyList_New((Py_ssize_t)self->exited_len);
    for (size_t i = 0; ids != NULL && i < self->exited_len; i++)
        PyList_SET_ITEM(ids, (Py_ssize_t)i, PyLong_FromUnsignedLongLong(self->exited[i]));
    self->exited_len = 0;
    pthread_mutex_unlock(&self->lock);
    return ids;
}

static PyObject *FastForward_peek(FastForward *self, PyObject *arg) {
    uint64_t id = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return NULL;
    pthread_mutex_lock(&self->lock);
    Stream *s = find(self, id);
    PyObject *seen = s == NULL ? Py_NewRef(Py_None)
                               : Py_BuildValue("(KKdd)", s->events, s->body_bytes, s->last_read, s->last_write);
    pthread_mutex_unlock(&self->lock);
    return seen;
}

static PyObject *FastForward_take(FastForward *self, PyObject *arg) {
    uint64_t id = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return NULL;
    pthread_mutex_lock(&self->lock);
    Stream *s = find(self, id);
    if (s == NULL) {
        pthread_mutex_unlock(&self->lock);
        Py_RETURN_NONE;
    }
    if (s->reason == RUNNING) {
        s->reason = TAKEN;
        epoll_ctl(self->epoll, EPOLL_CTL_DEL, s->engine, NULL);
        epoll_ctl(self->epoll, EPOLL_CTL_DEL, s->client, NULL);
    }
    PyObject *back = Py_BuildValue("(iy#y#KKdd)", s->reason, s->held ? s->held : "", (Py_ssize_t)s->held_len,
                                   s->unsent ? s->unsent : "", (Py_ssize_t)s->unsent_len, s->events, s->body_bytes,
                                   s->last_read, s->last_write);
    forget(self, s);
    pthread_mutex_unlock(&self->lock);
    return back;
}

static PyObject *FastForward_fileno(FastForward *self, PyObject *unused) { return PyLong_FromLong(self->exits); }

static PyObject *FastForward_close(FastForward *self, PyObject *unused) {
    stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *module_plain_events(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    size_t events = plain_events(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromSize_t(events);
}

static PyMethodDef FastForward_methods[] = {
    {"add", (PyCFunction)FastForward_add, METH_VARARGS,
     "add(engine_fd, client_fd, silence) -> id | None: relay a stream from a chunk boundary on."},
    {"exited", (PyCFunction)FastForward_exited, METH_NOARGS, "exited() -> ids of streams that ended here."},
    {"peek", (PyCFunction)FastForward_peek, METH_O,
     "peek(id) -> (events, body_bytes, last_read, last_write) | None."},
    {"take", (PyCFunction)FastForward_take, METH_O,
     "take(id) -> (reason, held, unsent, events, body_bytes, last_read, last_write) | None: the stream back."},
    {"fileno", (PyCFunction)FastForward_fileno, METH_NOARGS, "fileno() -> an eventfd, readable once a stream ended."},
    {"close", (PyCFunction)FastForward_close, METH_NOARGS, "close(): stop the thread; streams not taken are closed."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastForwardType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hearth_fast_forward.FastForward",
    .tp_basicsize = sizeof(FastForward),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Streams relayed between two sockets by a thread of their own while their content is plain.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastForward_init,
    .tp_dealloc = (destructor)FastForward_dealloc,
    .tp_methods = FastForward_methods,
};

static PyMethodDef module_methods[] = {
    {"plain_events", module_plain_events, METH_O, "plain_events(data) -> int: gateway.sse.plain_events in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hearth_fast_forward", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_hearth_fast_forward(void) {
    if (PyType_Ready(&FastForwardType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "FastForward", (PyObject *)&FastForwardType) < 0)
        return NULL;
    PyModule_AddIntConstant(m, "NOT_PLAIN", NOT_PLAIN);
    PyModule_AddIntConstant(m, "ENGINE_CLOSED", ENGINE_CLOSED);
    PyModule_AddIntConstant(m, "CLIENT_EVENT", CLIENT_EVENT);
    PyModule_AddIntConstant(m, "CLIENT_SLOW", CLIENT_SLOW);
    PyModule_AddIntConstant(m, "SILENT", SILENT);
    PyModule_AddIntConstant(m, "TAKEN", TAKEN);
    return m;
}
