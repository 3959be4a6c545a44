"""Microcontrollers: TensorFlow Lite for Microcontrollers (TFLM) and the firmware build.

:mod:`.ops` checks a ``.tflite`` against TFLM's op set; :mod:`.tflm` runs it in TFLM's reference
interpreter (the ``tflite-micro`` package, the ``micro`` extra) and finds the smallest arena;
:mod:`.firmware` compiles the C array with ``arm-none-eabi-gcc`` for the profile's core and reads the flash
it takes; :mod:`.check` is what the TFLite backend runs for a microcontroller profile.
"""
