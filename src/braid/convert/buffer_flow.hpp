// BufferFlow: which allocation an NCCL call's buffer argument points into, followed through the
// translation unit the way users write it: casts and pointer arithmetic (`(float*)(ws + off)`,
// `&buf[i]`), local aliases (`float* logits = ...`, range-for `auto& b : buckets`), struct fields
// and array elements (`model->acts.out`, `layers[l].w`, `bufs[i]`, `*(bufs + i)`, an element of
// `float* const ptrs[] = {a, b}`, `((float**)&model->grads)[i]`), and function parameters
// (every call of the helper in the file, several levels deep, member functions included), and a
// class's fields to what its constructors (member-initialiser list or body) and member functions
// assign them, then through the constructor's parameters to each construction of the class.
//
// Buffers are named by access path, not by variable: `layers[].w` (any index), `kv[0]` and
// `kv[1]` (distinct literal indices), `model.params.shard` (`->` and `.` alike). An allocation
// site (`cudaMalloc(&layers[l].w, ...)`) has one path; a use matches a site when the paths have
// the same components and indices agree or either is variable.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "braid/convert/lexer.hpp"

namespace braid::convert {

// A write of a class's field by its own code: `: comm_(c)` in a constructor's member-initialiser
// list, or `comm_ = c;` / `this->comm_ = c;` in a member function.
struct MemberWrite {
  std::string function;  // the constructor or member function
  std::string expr;      // the value, in that function's terms
  std::size_t token = 0;
  int line = 0;
  bool initialiser = false;
};

struct FunctionDef {
  std::string name;
  std::vector<std::string> params;
  std::size_t name_token = 0, body_open = 0, body_close = 0;  // code-token indices
  std::string owner;      // the class of a member function (defined in it, or as `Owner::name`)
  std::string enclosing;  // a lambda (`auto name = [&](...) {...}`): the function it is defined in
};

// The head of a function body opening at code[brace]: `name ( params ) [const|noexcept|override]*
// [: member(init), ...] {`. name == SIZE_MAX when the brace opens no function body.
struct FunctionHead {
  std::size_t name = SIZE_MAX, open = 0, close = 0;  // the name and its parameters' parentheses
  std::size_t init_colon = 0;                        // ':' of a member-initialiser list, 0 when none
  bool conversion = false;                           // `operator T*()`: its FunctionDef is kConversionOperator
  bool index = false;                                // `operator[](i)`: its FunctionDef is kIndexOperator
};
inline constexpr const char* kConversionOperator = "operator T*";
inline constexpr const char* kIndexOperator = "operator[]";
FunctionHead function_head(const std::vector<Token>& code, std::size_t brace);

// The access path an expression designates. `target` true: the first argument of an allocator
// (`&x` -> x, `(void**)&b[i]` -> b[], `(void**)p + i` -> p[]); false: a pointer argument
// (`(float*)(ws + 4096)` -> ws, `&buf[i]` -> buf). "" when the expression is no such path.
std::string access_path(const std::string& expr, bool target);

// True when a use path may name the same allocation as an allocation path.
bool path_matches(const std::string& use, const std::string& alloc);

// The root variable of a path and the rest (`model.params.shard` -> "model", ".params.shard").
std::pair<std::string, std::string> split_root(const std::string& path);

class BufferFlow {
 public:
  explicit BufferFlow(const std::vector<Token>& code);

  struct Resolution {
    std::vector<std::string> paths;  // the paths the expression may designate, in the callers' terms
    std::vector<std::string> via;    // how: "parameter g of allreduce_grads <- grads[l] (line 40)"
    std::string reason;              // "" when resolved
    bool null_given = false;         // a call site passes a null pointer (`nullptr`, `NULL`, `0`): no
                                     // buffer there, the default stream for a stream parameter
  };
  // Follows `expr`, written in function `function` before code token `at`, to the paths of the
  // variables it may point into (through aliases and up to `max_depth` levels of callers).
  Resolution resolve(const std::string& expr, const std::string& function, std::size_t at, int max_depth = 6) const;

  // Where the elements of a container came from: `buckets.push_back(b)`, `emplace_back(b)` or
  // `buckets[i] = b` after `cudaMalloc(&b.grad, ...)` make `buckets[].grad` that allocation; an
  // element built in place from its fields (`tasks.push_back({bufs[i], n})`, `push_back(Task{...})`,
  // `emplace_back(bufs[i], n)` of a struct without constructors) makes `tasks[].buf` what was
  // given for that field. For a path rooted at such a container with an index first, the paths
  // of the copied variables (`b.grad`) and of the given fields (followed where they were given);
  // empty otherwise.
  std::vector<std::string> element_origins(const std::string& path) const;
  // A variable a helper fills through a reference-to-pointer parameter (`void alloc(float*& p, size_t n)
  // { cudaMalloc(&p, ...); }` called as `alloc(g, n)`): the helper's parameter names, which are the
  // allocation's path there (one allocation site for every call, as for a helper returning the
  // pointer) with the helper; empty when no such helper is given `path`.
  // Also a helper's pointer-to-pointer parameter (`void dev_alloc(float** p, size_t n)
  // { cudaMalloc((void**)p, ...); }` called as `dev_alloc(&g, n)`).
  struct Fill {
    std::string function, param;  // the helper and its parameter, or the local it hands out through one (`*out = p`)
  };
  std::vector<Fill> reference_fills(const std::string& path) const;
  // The allocation path of `target`, the first argument of an allocation at code token `at`, when
  // it is a pointer-to-pointer parameter of the function there (`cudaMalloc((void**)p, ..)` in
  // `dev_alloc(float** p, ..)`): the parameter's name; "" otherwise.
  std::string pointer_parameter_target(const std::string& target, std::size_t at) const;
  // `ws.buf` where every declaration of `ws` in the file is of class C (an object, a pointer, a
  // reference) whose own code allocates `buf` through `&buf` (`void init() { cudaMalloc(&buf, ..); }`):
  // C and the field's path there (`buf`, with the rest of the path); empty otherwise.
  struct OwnField {
    std::string cls, path;
  };
  OwnField own_field_allocation(const std::string& path) const;
  // `model.grads_[i]` (or through `model.grads()`) where every declaration of `model` is of class C
  // whose own code fills its member container (`grads_.push_back(g)` in its constructor): each
  // variable copied in, with the rest of the path, and C's function that copied it; empty otherwise.
  struct OwnCopy {
    std::string cls, origin, function;
  };
  std::vector<OwnCopy> own_container_copies(const std::string& path) const;
  // `g.p_` for a whole object `g` whose class converts to the pointer it holds
  // (`operator T*() const { return p_; }`, or a smart pointer field's `.get()`); "" otherwise.
  std::string conversion_path(const std::string& path) const;
  // `g.bufs_[]` for an element `g[]` of an object `g` whose class indexes a field
  // (`T* operator[](size_t i) const { return bufs_[i]; }`); "" otherwise.
  std::string index_operator_path(const std::string& path) const;
  // `comm` for `comm.value()` of a std::optional (no function of this file is named `value`); "" otherwise.
  std::string optional_held(const std::string& expr) const;
  // Paths [from, end) of `out` that a member function of `cls` reached, called through `object`
  // (`ws .`, `arena ->`): a field of cls its own code never sets (`base`, allocated by the caller
  // with `cudaMalloc(&ws.base, n)`) is the object's (`ws.base`).
  void in_callers_terms(const std::string& cls, const std::string& object, Resolution& out, std::size_t from) const;
  bool class_sets_field(const std::string& cls, const std::string& field) const;
  // `params[].second` (a range-for binding's or an iterator's value) of a map is `params[]`, the value
  // written with `params[key]` (`cudaMalloc(&params[name], n)`); "" for any other path.
  std::string map_value_path(const std::string& path) const;
  // `B.grads[i]` (or `C[c].grads[i]`) where a helper fills the member container of the object it is
  // given by reference or pointer (`void alloc(Bufs& b) { cudaMalloc(&p, n); b.grads.push_back(p); }`
  // called as `alloc(B)`, `alloc(C[c])`, `alloc(&B)`): each variable copied in, with the rest of the
  // path (`cls` empty), and the helper that copied it.
  std::vector<OwnCopy> parameter_container_copies(const std::string& path) const;
  // The class whose member function `function` is ("" for a free function, or several classes').
  std::string owner_of(const std::string& function) const;

  // What the file writes into a field path that has no allocation of its own
  // (`model.params_memory = malloc_and_point(...)` in main, or through a parameter in a helper),
  // followed like a buffer expression; no paths when nothing writes it, a reason when a value
  // written cannot be followed.
  Resolution written_to(const std::string& path) const;

  // What the file gives the pointer variables (fields, elements) that may name `paths`, besides
  // their own allocations: `a = a_new;`, `std::swap(a, a_new)` (a solver's double buffer), `d_r =
  // d_pool + n;`, and what it gives those in turn: the paths of the values not in `paths` (each
  // followed like a buffer expression), and the first value that cannot be followed as the reason.
  Resolution exchanged_with(const std::vector<std::string>& paths) const;
  // True when a declaration of `name` anywhere in the file gives it a value (`float* p = buf;`,
  // `float* a[] = {x, y};`, a null pointer aside): its values are not only what is assigned later.
  bool declared_with_value(const std::string& name) const;
  // True when `name` is a local variable of free function `function`: declared in its body (not
  // static, not a parameter), so a same-named variable of another function is another variable.
  bool local_of(const std::string& name, const std::string& function) const;
  // True when the elements of array or container `name` get pointers only by assignment
  // (`grads[i] = arena.take<half>(n)`, `for (auto& g : grads) g = ...`): it is declared with no
  // pointer value (`T* a[3];`, `std::array<T*, 3> a{}`, `std::vector<T*> a(n)`) and every other use
  // reads it. Its elements are then what those assignments give (exchanged_with).
  bool elements_only_assigned(const std::string& name) const;
  // The line of the first call filling container `name` or one of its elements like a sequence
  // (`free_[bytes].push_back(p)`, `pool.emplace_back(q)`); 0 when there is none.
  int sequence_fill_line(const std::string& name) const;

  // `function` itself or the first of its callers (transitively, in this file) that is in
  // `roots`; "" when none is.
  std::string callers_reach(const std::string& function, const std::set<std::string>& roots) const;
  // The first call (or construction) under a condition of `function` or of a function calling it
  // (transitively), a constructor's class counting as constructed with each class holding it as a
  // member, or a construction braid cannot see (a container's element): code in `function` may
  // run on some ranks only. {"", 0} when none is.
  // `counts(token)` (default: conditional(token)) says which conditional call sites count.
  std::pair<std::string, int> conditional_caller(const std::string& function,
                                                 const std::function<bool(std::size_t)>& counts = {}) const;
  // Where `function` is called (or its class constructed): the code token of each call site.
  std::vector<std::size_t> call_sites_of(const std::string& function) const;
  // Each call site of `function` (its token) with the arguments it gives: a call, a construction, a
  // thread started on it.
  std::vector<std::pair<std::size_t, std::vector<std::string>>> call_arguments_of(const std::string& function) const;

  // An allocation's target `path` (written in `function` before code token `at`) named as the
  // object it is part of: through references (`auto& L = layers[l]`, range-for
  // `for (auto& L : layers)`), `L.shard` is `layers[].shard`. A pointer copy is its own variable.
  std::string target_path(const std::string& path, const std::string& function, std::size_t at) const;
  // What the pointer parameter `param` of `function` points to, named as target_path names it in
  // the one caller (unconditional): `init_comm(&dp)` for `void init_comm(ncclComm_t* c)`; "" else.
  std::string pointee_of_parameter(const std::string& param, const std::string& function) const;

  // The functions of this file that the calls between code tokens `from` and `to` reach, directly
  // or through the functions they call (what runs inside an ncclGroupStart/End written there).
  std::set<std::string> reached_between(std::size_t from, std::size_t to) const;
  // `function` or the first of its callers whose name is also used as a value (a function pointer,
  // a std::function, a callback), with the line of that use; "" when none is.
  std::pair<std::string, int> reached_through_value(const std::string& function) const;

  // The first token of the unnamed lambda (`push_back([&] {...})`, a callback) whose body holds
  // code token `at`, or SIZE_MAX: code that runs wherever its holder calls it.
  std::size_t unnamed_lambda_at(std::size_t at) const;
  // The line of the lambda bound to no name whose body holds code token `at` and whose parameter
  // `name` is (its arguments come from whoever holds it: not followed); 0 when there is none.
  int unnamed_lambda_parameter(const std::string& name, std::size_t at) const;
  // `std::for_each(grads.begin(), grads.end(), [&](half* g) {...})` (or `std::ranges::for_each(grads,
  // ...)`, `std::begin(grads)`): the lambda's one parameter `name`, whose body holds code token `at`,
  // is an element of the range, "grads [ i ]"; "" otherwise.
  std::string for_each_element(const std::string& name, std::size_t at) const;

  // A thread the file starts (buffer_flow_threads.cpp): `std::thread t(f, ..)` (and later
  // declarators, `b(f, ..)`), `std::thread(f, ..)`, `threads.emplace_back(f, ..)` into a container of
  // threads, `std::async([policy,] f, ..)`, `pthread_create(&t, attr, f, arg)`. Its function runs
  // once with the arguments, as a call would.
  struct ThreadStart {
    std::size_t open = 0;                       // the `(` or `{` its arguments open with
    std::size_t entry = 0;                      // code token of the function's name or a lambda's `[`
    std::size_t body_open = 0, body_close = 0;  // a lambda's body; 0 for a named function
    std::vector<std::string> args;              // what the function is given (std::ref(x) gives x)
  };
  const std::vector<ThreadStart>& thread_starts() const { return thread_starts_; }
  // The innermost function (or lambda) whose body holds code token `at` ("" at file scope).
  std::string function_at(std::size_t at) const;
  // True when token `at` sits under if/else/switch/?: (its execution may differ between ranks).
  bool conditional(std::size_t at) const { return at < conditional_.size() && conditional_[at]; }
  // What token `at` runs under: the `(` of each enclosing if's condition, innermost first (for an
  // else or an else-if, also the conditions of its chain before it, when its ifs have braced
  // bodies); kUnknownGuard for another else, a switch or a `?:` (empty when it is not conditional).
  static constexpr std::size_t kUnknownGuard = static_cast<std::size_t>(-1);
  const std::vector<std::size_t>& guards(std::size_t at) const;
  const std::vector<FunctionDef>& functions() const { return functions_; }
  // "Class::field" -> the values its class's code gives it (member-initialiser lists, assignments).
  const std::map<std::string, std::vector<MemberWrite>>& member_writes() const { return member_writes_; }

 private:
  void mark_conditionals();
  void mark_short_circuits();
  bool error_exit_condition(std::size_t op) const;
  void collect_lambdas();
  void record_value_uses();
  std::vector<std::string> struct_fields(const std::string& type) const;
  std::string stored_field(std::size_t k) const;
  std::string stored_variable(std::size_t k) const;
  const FunctionDef* function_named(const std::string& name) const;
  void collect_classes();
  bool is_class(const std::string& name) const;
  // The classes with a member of class `cls` (`struct Model { Buffer<float> w{n}; };`): each
  // construction of one constructs it.
  std::vector<std::string> classes_holding(const std::string& cls) const;
  // The line where `cls` is a template argument that constructs it out of braid's sight
  // (`std::vector<Buffer<float>>`, `std::optional<Buffer<float>>`) with a constructor that may
  // allocate: one the container runs itself (container_construction_allocates), or any when the
  // file constructs in place (an `emplace_back(n)` not given a `cls` temporary); 0 when none.
  int hidden_construction(const std::string& cls) const;
  // Whether a constructor of cls that a container runs itself (callable without arguments, a copy
  // or a move) allocates or calls a function of this file.
  bool container_construction_allocates(const std::string& cls) const;
  // Containers of a class whose every use is read (buffer_flow_containers.cpp): their fills are the
  // class's constructions (`emplace_back` recorded as a call site), their declarations no hidden one.
  void collect_visible_containers();
  std::size_t vector_of_class(std::size_t k, std::size_t& cls) const;
  bool rank_free_loops(std::size_t at, const FunctionDef& function) const;
  bool rank_free_expression(std::size_t b, std::size_t e, const std::set<std::string>& loop_vars, int depth) const;
  bool rank_free_name(const std::string& name, int depth) const;
  bool rank_free_field(const std::string& field, int depth) const;
  bool read_only_use(std::size_t k) const;
  // Code token k (an array) is given whole to a function of this file whose parameter there is only
  // read element by element (`ring(tail, ..)` with `send[k]` passed to NCCL): no element written.
  bool given_to_element_reader(std::size_t k) const;
  // A `[std::][ranges::]for_each(...)` whose last argument is the unnamed lambda [begin, end]: the
  // range it visits (`grads` of `grads.begin()`, `std::begin(grads)`, the ranges form; "" when
  // unknown), the lambda's one parameter and whether it takes it by value.
  struct ForEachVisit {
    std::string range, param;
    bool by_value = false;
  };
  std::optional<ForEachVisit> for_each_visit(std::size_t begin, std::size_t end) const;
  std::set<std::size_t> visible_containers_;  // the class token of each such container's declaration
  // A copy or move of another instance's same field (buffer_flow_members.cpp): no write of its own.
  bool copies_own_field(const FunctionDef& f, std::size_t b, std::size_t e, const std::string& field) const;
  void record_member_writes(const FunctionDef& f, std::size_t init_colon);
  void record_construction(std::size_t k, const std::string& caller, std::size_t end);
  bool follow_member(const std::string& path, const std::string& function, std::size_t at, int depth, Resolution& out,
                     std::vector<std::string>& stack) const;
  void record_element_copy(std::size_t k, const std::string& function, std::size_t end);
  void record_element_fields(std::size_t k, const std::string& function, std::size_t end);
  std::string element_type(const std::string& container) const;
  bool standard_container(const std::string& name) const;
  bool is_map(const std::string& container) const;
  // Whether a member function of class `owner` gives its smart-pointer field `field` another pointer (reset, swap,
  // release).
  bool owner_resets(const std::string& owner, const std::string& field) const;
  // Whether `container` is declared as a sequence of smart pointers (`std::vector<std::shared_ptr<float>> bufs`).
  bool holds_smart_pointers(const std::string& container) const;
  // Whether a word of `container`'s element type (the declaration's template arguments, back to the
  // sequence's name) is `wanted`.
  bool element_type_names(const std::string& container, const std::function<bool(const std::string&)>& wanted) const;
  // `std::vector<std::pair<float*, size_t>> chunks`: elements of two fields, first and second.
  bool holds_pairs(const std::string& container) const;
  // `& C [ i ]` for an iterator into standard container C (`C.find(key)`, `C.begin()`, ...) written as
  // code tokens [b, e); "" otherwise.
  std::string iterator_element(std::size_t b, std::size_t e) const;
  // The fields of an element of `container`, in order: a map's or a pair's first and second, or its
  // struct's fields.
  std::vector<std::string> element_fields(const std::string& container) const;
  std::size_t for_body_end(std::size_t close, std::size_t limit) const;
  void record_binding_aliases(std::size_t k, const FunctionDef& f);
  void record_field_write(std::size_t k, const std::string& function, std::size_t end);
  void record_pointer_array_store(std::size_t k, const std::string& function, std::size_t body_open, std::size_t end);
  std::vector<std::string> pointer_fields(const std::string& path) const;
  std::vector<std::string> fields_as_array(const std::string& init, const std::string& rest) const;
  struct ArrayInit {
    std::vector<std::string> elements;
    std::string text;  // `{a, b}`
    std::size_t token = 0;
    bool constant = false;  // `T* const name[]`
  };
  ArrayInit array_initialiser(const std::string& function, const std::string& root, std::size_t at) const;
  const FunctionDef* returning_helper(const std::string& expr) const;
  // The raw pointer a smart pointer expression owns: `buf.get()` -> `buf`, `std::unique_ptr<T, D>(p)`
  // or `device_ptr<T>(p)` (an alias of a smart pointer type) -> `p`; "" for any other form.
  std::string owned_pointer(const std::string& expr) const;
  // Where the smart pointer named `name` is given another pointer (`name.reset(q)`, `name.swap(o)`,
  // `std::swap(name, o)`, `name = ...` after a declaration with a value); 0 when nowhere.
  int repointed(const std::string& name) const;
  void collect_smart_types();
  // `std::unique_ptr<float, CudaFree> buf(p)` / `device_ptr<float> buf{p}` declaring the name at code
  // token k: `p`; "" for any other declaration.
  std::string smart_initialiser(std::size_t k, std::size_t end) const;
  // Views (buffer_flow_views.cpp): `std::span<T>(p, n)` and the file's aliases of span.
  void collect_view_types();
  bool declared_view_at(std::size_t d) const;
  bool declared_view(const std::string& name, const std::string& function, int depth) const;
  bool view_field(const std::string& field) const;
  bool view_expression(const std::string& expr, const std::string& function, int depth) const;
  // What a view expression is of: the pointer a construction is made from (`std::span<T>(p, n)` -> p),
  // the view a part is taken of (`v.subspan(o, n)` -> v), a name declared as a view itself; "" else.
  std::string view_source(const std::string& expr, const std::string& function, int depth) const;
  // The expression `expr` (`v.data()`, `std::span<T>(p, n)`, `v.subspan(o, n)`) points into, when it is
  // a view's data or a view made from another expression; "" for any other form.
  std::string viewed_pointer(const std::string& expr, const std::string& function) const;
  std::vector<std::size_t> return_statements(const FunctionDef& f) const;
  bool follow_accessor(const std::string& expr, const std::string& function, std::size_t at, int depth, Resolution& out,
                       std::vector<std::string>& stack) const;
  // The field every getter `getter` (of class `cls` when given) returns, as written or cast; "" otherwise.
  std::string returned_field(const std::string& getter, const std::string& cls = "") const;
  // The name a return statement's value [k, end) is, cast or not, or the pointer a smart pointer's
  // `.get()` gives (`smart`); "" for any other value.
  std::string returned_name(std::size_t k, std::size_t end, bool& smart) const;
  bool declares_field(const std::string& cls, const std::string& name) const;
  // follow_returns for every function of `helper`'s name (overloads, namesakes in other namespaces or
  // classes): a call by that name may be any of them.
  // With `element` >= 0: that element of each returned tuple (returned_element).
  void follow_namesakes_returns(const FunctionDef& helper, const std::string& rest, int depth, Resolution& out,
                                std::vector<std::string>& stack, int element = -1) const;
  void follow_returns(const FunctionDef& f, const std::string& rest, int depth, Resolution& out,
                      std::vector<std::string>& stack, int element = -1) const;
  // Tuples (buffer_flow_tuples.cpp): a structured binding of a helper's result, `std::get<I>(...)`,
  // and element I of a returned `{a, b}` / `std::make_tuple(a, b)` / `std::make_pair(a, b)`.
  bool record_tuple_binding(std::size_t k, std::size_t lb, std::size_t rb, const FunctionDef& f);
  bool alias_tuple_elements(std::size_t k, std::size_t rhs, const std::vector<std::string>& names,
                            const FunctionDef& f);
  // `std::tie(send, recv) = make_buffers(n);` at code token k (`tie`): the same, into variables declared before.
  void record_tie_assignment(std::size_t k, const FunctionDef& f);
  bool resolve_tuple_element(const std::string& expr, const std::string& function, std::size_t at, int depth,
                             Resolution& out, std::vector<std::string>& stack) const;
  std::string returned_element(std::size_t b, std::size_t e, int element) const;
  // The returned value [b, e), or its first or second element when `rest` reads one (`.first`,
  // `.second`: `rest` then keeps what follows it).
  std::string pair_member(std::size_t b, std::size_t e, std::string& rest) const;
  void resolve_into(const std::string& expr, const std::string& function, std::size_t at, int depth, Resolution& out,
                    std::vector<std::string>& stack) const;
  // resolve_into's steps (buffer_flow_steps.cpp): true when the name was followed there.
  bool resolve_alias(const std::string& root, const std::string& rest, const std::string& path,
                     const std::string& function, std::size_t at, int depth, Resolution& out,
                     std::vector<std::string>& stack) const;
  bool resolve_array_element(const std::string& expr, const std::string& root, const std::string& rest,
                             const std::string& path, const std::string& function, std::size_t at, int depth,
                             Resolution& out, std::vector<std::string>& stack) const;
  bool resolve_parameter(const std::string& root, const std::string& rest, const std::string& function, std::size_t at,
                         int depth, Resolution& out, std::vector<std::string>& stack) const;

  const std::vector<Token>& code_;
  std::vector<FunctionDef> functions_;
  std::vector<bool> conditional_;
  std::vector<std::uint32_t> guard_set_;              // per token: its entry in guard_sets_ (0: none)
  std::vector<std::vector<std::size_t>> guard_sets_;  // guards() of runs of tokens, innermost first
  struct Alias {
    std::string name, init;
    std::size_t token = 0;
    std::size_t scope_end = SIZE_MAX;  // the block (or range-for) it is declared in ends here
    bool reference = false;            // `T& name = ...`, `for (auto& name : ...)`
    bool pointer = false;              // `T* name = ...`: its fields are the pointee's
  };
  // True when `name = ...` is written between code tokens `from` and `to`.
  bool assigned_between(const std::string& name, std::size_t from, std::size_t to) const;
  // The alias of `root` in scope at code token `at` of `function` (the nearest declaration), or nullptr.
  const Alias* nearest_alias(const std::string& function, const std::string& root, std::size_t at) const;
  std::vector<std::pair<std::size_t, std::size_t>> unnamed_lambdas_;  // '[' .. '}' of lambdas bound to no name
  std::vector<int> owner_;  // code token -> innermost function (index into functions_), -1 outside
  std::map<std::string, int>
      value_uses_;  // function -> line where its name is used other than called (a pointer, a copy)
  std::map<std::string, std::vector<Alias>> aliases_;  // function -> declarations with initializers
  struct CallSite {
    std::string caller;
    std::vector<std::string> args;
    std::size_t token = 0;
    int line = 0;
  };
  std::map<std::string, std::vector<CallSite>> calls_;  // callee -> call sites
  // Whether argument `index` of call site `c` names `path` (given whole, or its address with
  // `address`), as written or through the caller's aliases.
  bool argument_names(const CallSite& c, std::size_t index, bool address, const std::string& path) const;
  bool container_use(std::size_t j, std::size_t first, const FunctionDef* f, const std::string& cls,
                     std::vector<CallSite>& emplaced, int& fills) const;
  void collect_thread_starts();
  void add_thread_start(std::size_t open, std::size_t skip);
  bool holds_threads(const std::string& name) const;
  const ThreadStart* thread_started_at(std::size_t entry) const;
  std::vector<ThreadStart> thread_starts_;
  std::string through_struct_pointer(const FunctionDef& f, const std::string& param) const;
  bool later_declarator(std::size_t k, const FunctionDef& f) const;
  struct ElementCopy {
    std::string origin, function;  // the variable (or view) copied in, and where
    std::string object;            // `b` of `b.grads.push_back(p)` (a member container), else ""
  };
  std::map<std::string, std::vector<ElementCopy>> element_copies_;  // container -> variables copied in
  // The one class every declaration of variable `name` in the file has (`C x`, `C* x`, `const C& x`, `C<T> x`).
  std::string declared_class(const std::string& name) const;
  struct ElementFields {
    std::string function;
    std::size_t token = 0;
    std::map<std::string, std::string> values;  // field -> the expression given for it
  };
  std::map<std::string, std::vector<ElementFields>> element_fields_;  // container -> elements built from fields
  struct ElementMade {
    std::string function, expr;  // `make_tensor(n)`: a helper of this file whose result is copied in
    std::size_t token = 0;
  };
  std::map<std::string, std::vector<ElementMade>> element_made_;  // container -> elements a helper returned
  std::set<std::string> listed_containers_;  // `T* c[] = {...}`: elements also from the list, not copies alone
  struct FieldWrite {
    std::string function, lhs, value;
    std::size_t token = 0;
    std::string through;  // the store that writes it, when not `lhs = value` itself (`*(ptrs[i])`)
    // Where `lhs` is read when another function names it (a table entry filled there): "" = `function`.
    std::string lhs_function;
    std::size_t lhs_token = 0;
  };
  // Tables of pointers to fields (buffer_flow_tables.cpp): `tensors[k] = TensorSpec{(void**)(&data->f), ..}`
  // fills an entry in one function, `*(tensors[i].ptr) = it;` stores through every entry in another.
  struct TableEntry {
    std::string function, table, member, field;  // member: the struct field the address initialises
    std::size_t token = 0;
  };
  struct TableStore {
    std::string function, table, member, value;
    std::size_t token = 0;
  };
  std::vector<TableEntry> table_entries_;
  std::vector<TableStore> table_stores_;
  void record_table_entry(std::size_t k, const std::string& function, std::size_t end);
  void record_table_store(std::size_t k, const std::string& function, std::size_t end);
  // After every function is read: a field write per entry of each table a store writes through.
  void link_table_stores();
  struct Exchange {
    std::string function, lhs, value;
    std::size_t token = 0;
  };
  std::vector<Exchange> exchanges_;  // `x = v;` into access paths, both ways of `std::swap(x, y)`
  void record_exchange(std::size_t k, const std::string& function, std::size_t end);
  void record_call(std::size_t k, const FunctionDef& f, const std::set<std::string>& defined,
                   const std::set<std::string>& callable_classes, std::set<std::string>& objects);
  std::vector<FieldWrite> field_writes_;  // `a.b = v;` statements, and stores through arrays of their addresses
  struct ClassBody {
    std::string name;
    std::size_t open = 0, close = 0;
  };
  std::vector<ClassBody> classes_;
  std::set<std::string> smart_types_;  // unique_ptr, shared_ptr and the file's aliases of them
  // Whether the file declares a variable or field `name` of one of those types (`empty`: declared
  // with no pointer, given one later by `reset(p)` or an assignment).
  bool declared_smart(const std::string& name, bool empty = false) const;
  std::set<std::string> view_types_;  // span and the file's aliases of it
  // Inheritance (buffer_flow_bases.cpp): a field's declaring class among `cls` and its bases, and the
  // keys of member_writes_ / member_addressed_ a write in `owner`'s code goes under.
  std::vector<std::string> base_classes(const std::string& cls) const;
  std::string declaring_class(const std::string& cls, const std::string& field, int depth = 4) const;
  std::vector<std::string> member_keys(const std::string& owner, const std::string& field) const;
  std::map<std::string, std::vector<MemberWrite>> member_writes_;  // "Class::field" -> its writes
  std::set<std::string> member_addressed_;  // "Class::field" also written through `&field` (an allocation, a creation)
};

}  // namespace braid::convert
