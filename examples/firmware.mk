# Makefile snippet for a firmware repository that ships models built by edgeopt.
# Include it from the top-level Makefile:   include tools/edgeopt/firmware.mk
#
#   make models          build every target of edgeopt.yaml into dist/ (gates checked; exit 5 on a miss)
#   make models-check    the same without the local benchmark (figures from validation and estimates)
#   make models-clean    remove dist/ (the conversion cache in $EDGEOPT_CACHE_DIR stays)
#
# dist/<target>.tar.gz holds the artifact and edgeopt_runtime/ (python3 -m edgeopt_runtime bench <target>);
# TFLite targets also get c_array/model_data.{h,c} to compile into the image.

EDGEOPT        ?= edgeopt
EDGEOPT_RECIPE ?= edgeopt.yaml
EDGEOPT_DIST   ?= dist
EDGEOPT_BENCH  ?= local
export SOURCE_DATE_EPOCH ?= 0

# Rebuild when the recipe or anything it names changes; edgeopt's cache makes no-op rebuilds quick.
EDGEOPT_INPUTS := $(EDGEOPT_RECIPE) $(wildcard models/*.onnx data/*.npz)

$(EDGEOPT_DIST)/summary.json: $(EDGEOPT_INPUTS)
	$(EDGEOPT) pipeline run $(EDGEOPT_RECIPE) --bench $(EDGEOPT_BENCH) --output $(EDGEOPT_DIST)

.PHONY: models models-check models-clean
models: $(EDGEOPT_DIST)/summary.json

models-check:
	$(EDGEOPT) pipeline run $(EDGEOPT_RECIPE) --bench none --output $(EDGEOPT_DIST)

models-clean:
	rm -rf $(EDGEOPT_DIST)
