"""Which CUDA toolkit libraries a toolkit tree holds, by the files that show them.

One table for both sides: the facts probe reports a toolkit's components with it, and the
controller's sm120kit/builds/cuda_libraries.py names them and says which build needs which.
"""

import glob
import os

#: Component (the extra of NVIDIA's cuda-toolkit meta package) -> (headers, unversioned libs,
#: as `-lcublas` and CMake's FindCUDAToolkit look them up).
COMPONENT_FILES = {
    "cublas": (("cublas_v2.h", "cublasLt.h"), ("libcublas.so", "libcublasLt.so")),
    "cusparse": (("cusparse.h",), ()),
    "cusolver": (("cusolverDn.h",), ()),
    "curand": (("curand_kernel.h",), ()),
    "nvrtc": (("nvrtc.h",), ("libnvrtc.so",)),
}


def toolkit_components(root):
    """The components whose headers and unversioned libraries are all in toolkit `root`
    (headers in include/ or targets/*/include, libraries in lib64/, lib/ or targets/*/lib)."""
    incs = [os.path.join(root, "include")] + glob.glob(
        os.path.join(root, "targets", "*", "include")
    )
    libs = [os.path.join(root, d) for d in ("lib64", "lib")]
    libs += glob.glob(os.path.join(root, "targets", "*", "lib"))

    def has(name, dirs):
        return any(os.path.exists(os.path.join(d, name)) for d in dirs)

    return sorted(
        comp
        for comp, (headers, sos) in COMPONENT_FILES.items()
        if all(has(h, incs) for h in headers) and all(has(s, libs) for s in sos)
    )
