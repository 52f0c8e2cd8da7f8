# cython: language_level=3
"""The buffer protocol of creation.TraceBuffer, checked before NumPy serves it.

A TraceBuffer that a traced value was written into holds its contents in a tracer; its own
memory is stale.  memoryview(), np.frombuffer, bytes(), ctypes' from_buffer and Cython's typed
memoryviews read an array through the buffer protocol, which is C (ndarray's bf_getbuffer
slot) and, before Python 3.12, has no Python-level hook.  `guard(cls, check)` puts a C
function in front of the slot of `cls` (a Python subclass of ndarray, so a heap type with its
own PyBufferProcs): it calls `check(obj)`, which raises for a stale buffer, and otherwise
hands the request to NumPy's own function; `release(obj)` is called when the buffer is
released (an export still held, a memoryview or np.frombuffer of a constant buffer, must not
go stale by a later write).  Only `cls` and subclasses made after the call are affected;
every other array keeps NumPy's slots."""

cdef extern from *:
    """
    static getbufferproc fl_numpy_getbuffer = NULL;
    static releasebufferproc fl_numpy_releasebuffer = NULL;
    static PyObject *fl_buffer_check = NULL;
    static PyObject *fl_buffer_release = NULL;

    static int fl_checked_getbuffer(PyObject *obj, Py_buffer *view, int flags) {
        PyObject *r = PyObject_CallOneArg(fl_buffer_check, obj);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        if (fl_numpy_getbuffer(obj, view, flags) < 0) {
            r = PyObject_CallOneArg(fl_buffer_release, obj);      /* undo the count */
            Py_XDECREF(r);
            return -1;
        }
        return 0;
    }

    static void fl_counted_releasebuffer(PyObject *obj, Py_buffer *view) {
        PyObject *type, *value, *tb, *r;
        if (fl_numpy_releasebuffer != NULL)
            fl_numpy_releasebuffer(obj, view);
        PyErr_Fetch(&type, &value, &tb);          /* release cannot fail */
        r = PyObject_CallOneArg(fl_buffer_release, obj);
        if (r == NULL)
            PyErr_WriteUnraisable(obj);
        Py_XDECREF(r);
        PyErr_Restore(type, value, tb);
    }

    static int fl_guard(PyObject *type, PyObject *check, PyObject *release) {
        PyTypeObject *t = (PyTypeObject *)type;
        if (!PyType_Check(type) || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
                t->tp_as_buffer == NULL || t->tp_as_buffer->bf_getbuffer == NULL) {
            PyErr_SetString(PyExc_TypeError,
                            "guard() takes a Python class that inherits the buffer protocol");
            return -1;
        }
        if (t->tp_as_buffer->bf_getbuffer == fl_checked_getbuffer)
            return 0;                                   /* guarded already */
        if (fl_numpy_getbuffer != NULL) {
            PyErr_SetString(PyExc_RuntimeError, "guard() serves one class only");
            return -1;
        }
        Py_INCREF(check);
        Py_INCREF(release);
        fl_buffer_check = check;
        fl_buffer_release = release;
        fl_numpy_getbuffer = t->tp_as_buffer->bf_getbuffer;
        fl_numpy_releasebuffer = t->tp_as_buffer->bf_releasebuffer;
        t->tp_as_buffer->bf_getbuffer = fl_checked_getbuffer;
        t->tp_as_buffer->bf_releasebuffer = fl_counted_releasebuffer;
        PyType_Modified(t);
        return 0;
    }
    """
    int fl_guard(object type, object check, object release) except -1


def guard(type cls, check, release):
    """Make every buffer request on an instance of `cls` call `check(instance)` first, and
    every release of one `release(instance)`."""
    fl_guard(cls, check, release)
