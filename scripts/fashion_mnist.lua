-- fashion_mnist.lua - train an MLP or a small CNN on Fashion-MNIST with
-- model:fit and report the test accuracy.
--   ldist scripts/fashion_mnist.lua [mlp|cnn] [epochs] [batch_size]
local which = arg and arg[1] or "mlp"
local epochs = tonumber(arg and arg[2]) or 10
local batch_size = tonumber(arg and arg[3]) or (which == "cnn" and 64 or 128)

tensor.seed(1)
local x_train, y_train = datasets.fashion_mnist.load("train")
local x_test, y_test = datasets.fashion_mnist.load("test")

local function make_model(kind)
  if kind == "mlp" then   -- 784-512-256-10
    return nn.Sequential{ nn.Flatten(), nn.Dense(512, "relu"), nn.Dense(256, "relu"), nn.Dense(10) }
  elseif kind == "cnn" then   -- two convolutions, as in the Keras examples
    return nn.Sequential{
      nn.Reshape{28, 28, 1},
      nn.Conv2D(32, 3, {activation = "relu"}), nn.MaxPool2D(2),
      nn.Conv2D(64, 3, {activation = "relu"}), nn.MaxPool2D(2),
      nn.Flatten(), nn.Dropout(0.3), nn.Dense(128, "relu"), nn.Dense(10),
    }
  end
  error("model must be 'mlp' or 'cnn', got " .. tostring(kind))
end

model = make_model(which)
model:compile{
  optimizer = optim.Adam{learning_rate = 1e-3},
  loss = losses.SparseCategoricalCrossentropy{from_logits = true},
  metrics = {"accuracy"},
}
local train = data.Dataset.from_tensor_slices(x_train, y_train):shuffle(60000, {seed = 1}):batch(batch_size):prefetch(2)
local test = data.Dataset.from_tensor_slices(x_test, y_test):batch(1000)
history = model:fit(train, {epochs = epochs, validation_data = test})
model:summary()
local r = model:evaluate(test)
print(("test accuracy %.4f  (loss %.4f)"):format(r.accuracy, r.loss))
return r.accuracy
