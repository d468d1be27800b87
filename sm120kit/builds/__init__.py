"""What a package build needs on the controller's side: the source store, tree packing,
patches, build knobs, CMake defines, the compile cache and the toolkit's CUDA libraries."""
