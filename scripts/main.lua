-- main.lua - what `make run` runs: a short Fashion-MNIST training in the seed's
-- style, then (on a terminal) the ldist prompt with everything in scope:
--   model, history, x_train, y_train, x_test, y_test, train_ds, test_ds
print("ldist: training a small MLP on Fashion-MNIST (2 epochs) ...")
tensor.seed(42)
x_train, y_train = datasets.fashion_mnist.load("train")
x_test, y_test = datasets.fashion_mnist.load("test")

local strategy = distribute.get_strategy()
do
  local _ <close> = strategy:scope()
  model = nn.Sequential{ nn.Flatten(), nn.Dense(256, "relu"), nn.Dense(128, "relu"), nn.Dense(10) }
  model:compile{
    optimizer = optim.Adam(),
    loss = losses.SparseCategoricalCrossentropy{from_logits = true},
    metrics = {"accuracy"},
  }
end
train_ds = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(60000, {seed = 42}):batch(128)
test_ds = data.Dataset.from_tensor_slices(x_test, y_test):batch(1000)
history = model:fit(train_ds, {epochs = 2, validation_data = test_ds})
local r = model:evaluate(test_ds)
print(("test accuracy: %.4f"):format(r.accuracy))
-- the hint fits the terminal: wrapped at words, one expression per piece
print(ldist.wrap("In scope: model, history, x_train, y_train, x_test, y_test, train_ds, test_ds."))
print("Try: model:summary()   plot(history)   help(nn.Dense)")
print("     model:predict(x_test:slice(0, 0, 5)):argmax(1)")
