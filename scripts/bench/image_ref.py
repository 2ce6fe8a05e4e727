"""scripts/bench/image_ref.py DIR - keras.utils.image_dataset_from_directory on
the folder image_bench.lua writes, timed as image_bench.lua times ldist: the
call and one loop over every batch (batch 32, 28x28 grayscale), then a second
epoch. Prints "first_pass second_pass" images/s."""
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402

d = sys.argv[1]
t0 = time.perf_counter()
ds = keras.utils.image_dataset_from_directory(d, image_size=(28, 28), color_mode="grayscale",
                                              batch_size=32, seed=1, verbose=False)
n = 0
for x, y in ds:
    n += int(x.shape[0])
t1 = time.perf_counter()
for x, y in ds:
    pass
t2 = time.perf_counter()
print(f"{n / (t1 - t0):.0f} {n / (t2 - t1):.0f}")
