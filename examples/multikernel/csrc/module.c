/* The Python side: multikernel._C.units() lists what each nvcc-compiled unit reports
   (unit * 1000 + its salt), which shows which version of every unit the wheel holds. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "multikernel.h"

static int (*const UNITS[])(void) = {
    multikernel_unit_0, multikernel_unit_1, multikernel_unit_2, multikernel_unit_3,
    multikernel_unit_4, multikernel_unit_5, multikernel_unit_6, multikernel_unit_7,
};

static PyObject* units(PyObject* self, PyObject* args) {
  (void)self;
  (void)args;
  const Py_ssize_t n = (Py_ssize_t)(sizeof(UNITS) / sizeof(UNITS[0]));
  PyObject* out = PyList_New(n);
  if (out == NULL) return NULL;
  for (Py_ssize_t i = 0; i < n; ++i) PyList_SET_ITEM(out, i, PyLong_FromLong(UNITS[i]()));
  return out;
}

static PyMethodDef METHODS[] = {
    {"units", units, METH_NOARGS, "unit * 1000 + salt, per nvcc-compiled unit"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&MODULE); }
