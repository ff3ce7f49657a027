// A stacked LSTM forward written against ATen in C++, in nn.LSTM's weight layout: per layer
// w_ih [4H, I], w_hh [4H, H], b_ih [4H], b_hh [4H], gates in the order i, f, g, o. Every op
// is an ATen op, so autograd records them and the backward comes for free.
#include <torch/extension.h>

#include <tuple>
#include <vector>

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_forward(
    const at::Tensor& x, const at::Tensor& h0, const at::Tensor& c0,
    const std::vector<at::Tensor>& weights) {
  const int64_t layers = h0.size(0);
  TORCH_CHECK(static_cast<int64_t>(weights.size()) == 4 * layers,
              "cpp_lstm: expected 4 weights per layer (w_ih, w_hh, b_ih, b_hh), got ",
              weights.size(), " for ", layers, " layers");
  const int64_t steps = x.size(0), batch = x.size(1);
  at::Tensor input = x;
  std::vector<at::Tensor> h_n, c_n;
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor& w_ih = weights[4 * l];
    const at::Tensor w_hh_t = weights[4 * l + 1].t();
    const at::Tensor bias = weights[4 * l + 2] + weights[4 * l + 3];
    // Every step's input projection in one GEMM, then one small GEMM per step.
    const at::Tensor projected =
        at::addmm(bias, input.reshape({steps * batch, input.size(2)}), w_ih.t())
            .view({steps, batch, -1});
    at::Tensor h = h0[l], c = c0[l];
    std::vector<at::Tensor> outputs;
    outputs.reserve(steps);
    for (int64_t t = 0; t < steps; ++t) {
      const auto gates = at::addmm(projected[t], h, w_hh_t).chunk(4, 1);
      c = gates[1].sigmoid() * c + gates[0].sigmoid() * gates[2].tanh();
      h = gates[3].sigmoid() * c.tanh();
      outputs.push_back(h);
    }
    input = at::stack(outputs);
    h_n.push_back(h);
    c_n.push_back(c);
  }
  return {input, at::stack(h_n), at::stack(c_n)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("lstm_forward", &lstm_forward, "stacked LSTM forward, nn.LSTM's layout");
}
