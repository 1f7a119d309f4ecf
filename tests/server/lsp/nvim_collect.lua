-- Driven by tests/server/lsp/test_lsp_neovim_headless.py inside `nvim --headless --clean` (Neovim 0.7 API:
-- vim.lsp.start_client + buf_attach_client; no vim.lsp.start, no -l).
local out = vim.env.MSPROF_OUT
local want = tonumber(vim.env.MSPROF_WANT)
local result = { diagnostics = {}, actions = {}, error = vim.NIL }

local function finish()
  vim.fn.writefile({ vim.fn.json_encode(result) }, out)
  vim.cmd("qa!")
end

local id = vim.lsp.start_client({
  name = "msprof-lsp",
  cmd = vim.fn.json_decode(vim.env.MSPROF_CMD),
  root_dir = vim.env.MSPROF_ROOT,
  init_options = vim.fn.json_decode(vim.env.MSPROF_INIT),
})
if not id then
  result.error = "start_client failed"
  return finish()
end
vim.lsp.buf_attach_client(0, id)

local ok = vim.wait(60000, function() return #vim.diagnostic.get(0) >= want end, 100)
if not ok then
  result.error = "timed out waiting for diagnostics"
end
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(result.diagnostics, {
    lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
    code = d.code, source = d.source, message = d.message, severity = d.severity,
  })
end

-- code actions for the first diagnostic, as vim.lsp.buf.code_action() would ask
local first = vim.diagnostic.get(0)[1]
if first then
  vim.api.nvim_win_set_cursor(0, { first.lnum + 1, first.col })
  local params = vim.lsp.util.make_range_params()
  params.context = { diagnostics = vim.lsp.diagnostic.get_line_diagnostics(0, first.lnum) }
  local responses = vim.lsp.buf_request_sync(0, "textDocument/codeAction", params, 20000) or {}
  for _, response in pairs(responses) do
    for _, action in ipairs(response.result or {}) do
      table.insert(result.actions, { title = action.title, kind = action.kind, has_edit = action.edit ~= nil,
                                     has_data = action.data ~= nil })
    end
  end
  result.action_line = first.lnum
end
finish()
