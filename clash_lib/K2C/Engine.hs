{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
The filter engine shared by dense and conv2d layers: one window of @K@ values
in, @F@ filter (neuron) results out, computed by @p@ processing elements (PEs)
that spend @b@ cycles on each group of @p@ filters, in a datapath pipelined
with one register per @l@ adder levels.

= The three knobs

* @p@, @1 <= p <= F@: PEs, i.e. filters computed in parallel. The @F@ filters
  form @G = ceil(F / p)@ groups; group @g@ is filters @g*p .. g*p+p-1@ (in the
  last group, filters past @F@ are zero padding: computed, then dropped).
* @b@, @1 <= b <= K@: cycles a PE spends on one filter. The window, zero
  padded to @b * ch@ values, is cut into @b@ chunks of @ch = ceil(K / b)@
  values; a PE multiplies one chunk per cycle.
* @l >= 0@: adder levels per pipeline stage. @l = 0@ computes a chunk's
  products, adder tree, accumulation, requantization and activation in one
  cycle (the critical path of the whole design). @l >= 1@ registers the
  multipliers' operands twice (the window's chunk and the weight word: the
  first register takes the route from the weight memory, a block RAM whose
  read has no output register, ~6 ns before any route; the second sits
  beside the multiplier block and becomes its input register), the products
  (twice: the multiplier block's output register, then one for the route to
  the tree), the adder tree ('K2C.Filter.adderTree',
  @TreeLevels ch = ceil(log2(ch + 1))@ levels) after every @l@-th level, and
  the accumulators (also when @b = 1@), the requantized results and the
  activated results ('K2C.Activation.Finish', a stage each, and @t@ more
  after a table activation's block RAM read), and with @G >= 2@ groups the
  result register @R@ before the output queue: @D = 7 + t +
  TreeLevels ch `div` l + [G >= 2]@ cycles more latency ('PipeDepth'; one
  more when @b >= 2@ and @l@ does not divide the tree's levels:
  'TreeStages'), the same throughput and the same values.

The weight ROM ("K2C.Memory") has @G * b@ words; word @g*b + t@ is what the PEs
need in the @t@-th cycle of group @g@, so the engine reads it in order, one
word per cycle. The arithmetic of one PE and one chunk, and the exact
accumulator contract (saturating order included), are in "K2C.Filter".

= Hardware

* multipliers: @p * ch@; adders: @p@ trees of @ch + 1@ terms and @p@
  accumulator adders with clamps ("K2C.Filter"); @p@ per-neuron functions;
* ROM: @G * b@ words of @p * (ch * BitSize w + BitSize bias)@ bits;
* registers: the window (@b * ch@ values, a rotating shift register: the
  current chunk is always its head, so no multiplexer picks chunks), @p@
  accumulators (none when @b = 1@), the result register @R@ collecting a
  window's groups (@G * p@ outputs, removed by synthesis when @G = 1@),
  pipelined: the operands (a chunk of the window and the weight word), the
  @p * (ch + 1)@ terms, the tree's registered levels, @p@ accumulators, @p@
  requantized and @p@ activated results, each stage with a valid/control tag; control: counters
  @Index (G*b)@, @Index b@, @Index G@, a busy flag, the credit count, two
  flags that make the input ready a function of three flip-flops (last word,
  room for a window), a flag for the last word but one (from which the last
  word and the window's load select are registered), and the ROM address (the
  word after the current one, a counter of its own);
* the output queue: a 'K2C.Fifo.fifo' of @Q@ results (LUT RAM), @Q@ =
  'QueueDepth' = @2 + (D + e + 1) `div` (G * b)@, @e@ below.

= Protocol and exact timing

The engine is idle or busy with one window. Busy, it takes one /step/ per
ROM word, @S = G * b@ steps, one per cycle: it never stalls. Downstream
stalls reach it only through the output queue and a credit count of the
windows it holds (accepted, result not yet taken from the queue).

* The window is loaded @e@ cycles after it moves in ('Loading'): @e = 0@
  ('engine', 'atAccept'), from the input beat as it moves; @e = 1@
  ('engineFrom' with 'afterAccept'), in the next cycle, from a producer's
  register that still holds it then (a window generator's shift register).
* Input ready (registered state only) = (idle, or busy with the last word,
  in the cycle after the next when @e = 1@) and fewer than @Q@ windows held.
  A window moves in when ready and valid. The ROM reads word 0 in the
  engine's last step (and once after reset) and does not read while idle, so
  word 0 is at the ROM output in the cycle after a window is loaded; each
  step reads the word of the next.
* A window accepted in cycle @a@ takes its steps in cycles @a + e + 1 .. a +
  e + S@; its complete result enters the queue in cycle @a + e + S + D@
  (@D = 0@ when @l = 0@: in the last step's cycle).
* The queue ("K2C.Fifo") shows a result from the cycle after it entered, and
  not before the previous result has moved out.

Consequences, with @v_i@ the first cycle window @i@ is offered and @M_i@ the
cycle its result moves out:

* window @i@ moves in in @a_i = max(v_i, a_(i-1) + S, M_(i-Q) + 1)@ (the
  same rule for both @e@: with @e = 1@ the next window is accepted in the
  last step but one and loaded in the last step);
* its result is valid from @max(a_i + e + S + D, M_(i-1)) + 1@;
* with downstream always ready: @a_i = max(v_i, a_(i-1) + S)@ and the result
  moves in @a_i + e + S + D + 1@. One window every @S@ cycles, also for @S =
  1@; @Q@ is the fewest results for which this holds.

Ready never depends on the input's valid nor, combinationally, on
downstream's ready.

= Variants

'engineWith' is this engine for any way of holding the window and of
handing chunks to the PEs; 'engine' shares one window among all PEs, the
depthwise engine ("K2C.Depthwise") gives each PE its own channel's window.
Control, ROM walk, pipeline, accumulators, queue and hence every timing rule
above are the same code in both.
-}
module K2C.Engine
  ( CeilDiv
  , EngineShape
  , PipeDepth
  , QueueDepth
  , TreeStages
  , Loading
  , atAccept
  , afterAccept
  , engine
  , engineFrom
  , engineWith
  , chunks
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Activation (Finish (..), TableRegs)
import K2C.Fifo (fifo, nextCount)
import K2C.Filter (Accumulates, ChunkBits, TreeLevels, accumulate, adderTree, chunkTerms)
import K2C.Memory (WeightRom, readWeights)
import K2C.Stream (Stream)

-- | @ceil(a / b)@ for @b >= 1@.
type CeilDiv a b = Div (a + b - 1) b

-- | The sizes of an engine with window length @k@, @f@ filters, @p@ PEs and
-- @b@ cycles per group: chunk length @ch = ceil(k / b)@ and @g = ceil(f / p)@
-- groups. The inequalities are implied by the equalities but stated so that
-- the type checker can use them.
type EngineShape k f p b ch g =
  ( KnownNat k, KnownNat f, KnownNat p, KnownNat b, KnownNat ch, KnownNat g
  , 1 <= k, 1 <= f, 1 <= p, 1 <= b, p <= f, b <= k
  , ch ~ CeilDiv k b, g ~ CeilDiv f p
  , k <= (b * ch), f <= (g * p), 1 <= g, 1 <= (g * b) )

-- | @D@: the cycles from a window's last step to its result entering the
-- output queue, for chunks of @ch@ values, @l@ adder levels per stage, @b@
-- chunks per window and @t@ registers after a table activation
-- ('K2C.Activation.Finish'). 0 when @l = 0@ (everything in the step's cycle);
-- otherwise two operand and two product registers, the tree's registers
-- ('TreeStages'), the accumulators and the finish's registers (requantized,
-- activated, @t@ more), and with @g >= 2@ groups the result register the
-- queue is written from: @7 + t + TreeStages ch l b + [g >= 2]@.
type PipeDepth ch l g b t = Min 1 l * (7 + t + TreeStages ch l b + Min 1 (Div g 2))

-- | The adder tree's register stages: one per @l@ levels, and one after its
-- last level when that level would otherwise share a cycle with an
-- accumulating adder and its clamp (@b >= 2@ and @l@ not dividing the
-- levels; the thesis CNN at 130 multipliers on ECP5: a tree level, then the
-- accumulator's carry chain and clamp, 13.3 ns).
type TreeStages ch l b =
  Div (TreeLevels ch) (Max 1 l) + Min 1 (Div b 2) * Min 1 (Mod (TreeLevels ch) (Max 1 l))

-- | @Q@: the output queue's depth, which is also the most windows the engine
-- holds at once (accepted, result not yet taken). @2 + (D + e + 1) `div` S@
-- with @S = G * b@ steps per window and @e@ the load's delay ('Loading'): the
-- fewest for which an always-ready downstream never holds the input back.
type QueueDepth ch l g b t e = 2 + Div (PipeDepth ch l g b t + e + 1) (g * b)

-- | Where the engine loads an accepted window from, and @e@, the cycles
-- after the accept it does so (its steps start the cycle after the load).
-- 'atAccept': the input beat itself, in the accept's cycle (@e = 0@).
-- 'afterAccept': a producer's register that still holds the accepted beat in
-- the cycle after (@e = 1@): "K2C.Window"'s shift register ('K2C.Window.
-- windowHeld'). A window generator offers a window through a multiplexer (the
-- waiting window or the one its last pixel is making), so loading the offer
-- puts that multiplexer, the pending flag, the line buffer's word and the
-- pixel before every bit of the engine's window: 2.2 LUT4 and a PFUMX per bit
-- on ECP5 (resnet_digits balanced to the LFE5U-85F: 12.1k of its 29.2k LUT4
-- and 5.2k of its 6.0k PFUMX in its four 3x3 convolutions' windows). Loaded
-- from the shift register, a window bit is the register's bit or the rotated
-- one, one LUT (that design: 547 PFUMX, 39.8k LUT4 packed against 46.7k); the
-- cost is one cycle of latency, not throughput (the accept rule stays: see
-- the module header).
newtype Loading dom (e :: Nat) i = Loading (Signal dom (Maybe i) -> Signal dom i)

-- | Load the accepted beat in the accept's cycle.
atAccept :: Loading dom 0 i
atAccept = Loading (fmap fromJustX)

-- | Load from @held@ in the cycle after the accept: @held@ must then still
-- show the accepted beat.
afterAccept :: Signal dom i -> Loading dom 1 i
afterAccept held = Loading (const held)

-- | The filter engine; see the module header for the schedule. @finish@ is
-- applied to each filter's final accumulator (requantize, then activate).
engine
  :: forall dom k f p b l ch g ai af wi wf bi bf ci cf o t
   . ( HiddenClockResetEnable dom
     , EngineShape k f p b ch g
     , KnownNat l, TableRegs t
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat p
  -> SNat b
  -> SNat l
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec k (SFixed ai af)) (Vec f o)
engine p b l = engineFrom p b l atAccept

-- | The filter engine loading its windows as @loading@ says ('Loading'):
-- 'engine' is it with 'atAccept'; behind a window generator, with
-- 'afterAccept' of the generator's shift register. One window shared by all
-- PEs, held as @b@ chunks in a rotating register.
engineFrom
  :: forall dom k f p b l ch g ai af wi wf bi bf ci cf o t e
   . ( HiddenClockResetEnable dom
     , EngineShape k f p b ch g
     , KnownNat l, TableRegs t, KnownNat e, e <= 1
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat p
  -> SNat b
  -> SNat l
  -> Loading dom e (Vec k (SFixed ai af))
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec k (SFixed ai af)) (Vec f o)
engineFrom SNat SNat l loading =
  engineWith @dom @(Vec k (SFixed ai af)) @(Vec b (Vec ch (SFixed ai af))) @f @p @b @l @ch @g
             l loading chunks (`rotateLeftS` d1) (\_ held -> repeat (current held))
  where
    current :: Vec b (Vec ch (SFixed ai af)) -> Vec ch (SFixed ai af)
    current = leToPlus @1 @b head

-- | What travels beside a step's data through the pipeline: the step is
-- real (valid), the first chunk of its group, the last chunk of its group,
-- the group, the window's last step.
type Tag g = (Bool, Bool, Bool, Index g, Bool)

-- | The engine's control, ROM walk, PEs, pipeline and output queue, for any
-- way of holding the window: @load@ turns an accepted input into the held
-- window, @next@ advances it after every step and must give back the loaded
-- window after @b@ steps (so every group sees the same chunks), and
-- @operands@ gives each PE the chunk it multiplies in this step from the
-- group counter and the held window. The schedule and timing are the module
-- header's, whatever these three functions are ('engine': one window shared
-- by all PEs; "K2C.Depthwise": each PE its own channel's window).
engineWith
  :: forall dom i held f p b l ch g ai af wi wf bi bf ci cf o t e
   . ( HiddenClockResetEnable dom
     , KnownNat f, KnownNat p, KnownNat b, KnownNat l, KnownNat ch, KnownNat g, TableRegs t
     , KnownNat e, e <= 1
     , 1 <= b, f <= (g * p), 1 <= (g * b)
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX held, NFDataX o )
  => SNat l
  -> Loading dom e i
  -> (i -> held)
  -> (held -> held)
  -> (Index g -> held -> Vec p (Vec ch (SFixed ai af)))
  -> WeightRom (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom i (Vec f o)
engineWith SNat (Loading source) load next operands weights finish (input, readyOut) = (output, readyIn)
  where
    levelsPerStage = natToNum @l :: Int
    pipelined      = levelsPerStage > 0

    -- Issue (reset). A busy cycle is a step: the engine never stalls. The
    -- counters wrap to 0 after the last word, so they are 0 when idle.
    busy     = register False busyNext
    word     = register (0 :: Index (g * b)) wordNext
    chunk    = register (0 :: Index b) (mux busy (wrap <$> chunk) chunk)
    group    = register (0 :: Index g) (mux (busy .&&. groupEnd) (wrap <$> group) group)
    groupEnd = (== maxBound) <$> chunk

    -- Credits: windows accepted whose result has not left the queue.
    held' = register (0 :: Index (QueueDepth ch l g b t e + 1)) heldNext
    heldNext = nextCount <$> held' <*> accepted <*> taken
    taken = (isJust <$> output) .&&. readyOut

    -- Input ready from three flip-flops: the word counter's and the credit
    -- count's comparisons are registered from their next values (lastWord is
    -- word == maxBound, room is held' < maxBound, in every cycle), so the
    -- ready that travels upstream (to a queue or a window generator, often
    -- far away on the chip) starts one LUT from registers, not after a
    -- counter's comparator (digits_dense on ECP5: 12.3 ns, 10.6 of it routing).
    --
    -- The next word is the last one exactly when the engine is busy with the
    -- last but one (idle, the word counter is 0), so with @S >= 2@ both
    -- lastWord and open are registered from 'penult' (word == S - 2, itself
    -- registered from the next word): no counter's increment and comparison
    -- before them. open drives the select of every bit of the window (5,135
    -- pins on inception_digits, copied 80 times), so its input logic is a
    -- LUT or two from flip-flops and the input's valid (the word counter's
    -- increment and comparison there would be inception_digits' critical path
    -- on ECP5, 12.2 ns).
    single   = natToNum @(g * b) == (1 :: Integer)
    penult   = if single then pure False else register (natToNum @(g * b) == (2 :: Integer))
                 ((== maxBound - 1) <$> wordNext)
    nextLast = if single then pure True else busy .&&. penult  -- wordNext == maxBound
    lastWord = register single nextLast
    room     = register True ((< maxBound) <$> heldNext)
    -- open: idle or busy with the last word (not busy || lastWord), also
    -- registered from next values, so that the window's load select below is
    -- a flip-flop's output too.
    open     = register True ((not <$> busyNext) .||. nextLast)
    readyIn  = (if late then openAhead else open) .&&. room
    accepted = readyIn .&&. (isJust <$> input)

    -- Loading after the accept ('afterAccept'): the window is loaded, and the
    -- steps start, a cycle after it was accepted ('start'), so the input is
    -- ready when the engine will be open in the next cycle: openAhead, the
    -- value open will have then, registered from the values busy and
    -- lastWord will have in two cycles (busy2, last2).
    late      = natToNum @e == (1 :: Integer)
    start     = if late then register False accepted else accepted
    busy2     = accepted .||. (busyNext .&&. (not <$> nextLast))
    last2     = if single then pure True else busyNext .&&. ((== maxBound - 1) <$> wordNext)
    openAhead = register True ((not <$> busy2) .||. last2)

    -- The ROM's registered output is the word of the current step. Its
    -- address comes straight from a register of its own ('ahead'), so the
    -- wide ROM's decoders (LUTs when it is shallow) see no counter logic
    -- before them, and that register's next value comes from the engine's
    -- own registers only: nothing from the input's handshake. ahead is the
    -- word after the current one (wrap word) in every cycle after the first;
    -- when idle that is word 1, read speculatively for a window not yet
    -- accepted, so the ROM reads only while busy (and once after reset, at
    -- address 0): an idle ROM holds word 0, which a window's first step
    -- needs, and the last step of a window reads word 0 again (wrap of the
    -- last word). Before, the address's next value chose between word 0 and
    -- word 1 by 'accepted', the input's valid: the thesis CNN on ECP5 at 132
    -- multipliers, seed 3: conv_2's address cone, 4 LUTs from the window
    -- generator, spread across the chip before the address's fan-out
    -- copies, 12.7 ns.
    wordNext  = mux busy (wrap <$> word) word
    busyNext  = start .||. (busy .&&. (not <$> lastWord))
    ahead     = register (0 :: Index (g * b)) (mux busy (wrap <$> ahead) (pure (wrap 0)))
    firstRead = register True (pure False)
    weightsWord = andEnable (busy .||. firstRead) (readWeights weights ahead)

    -- Datapath registers have no reset: the valid bits say what they hold.
    -- The window has no enable: whenever the engine is open it loads the
    -- input (the window accepted, or one it does not use: a window is only
    -- read in the steps after its acceptance), otherwise it advances. Its
    -- select is the 'open' flip-flop, where an enable (accepted or busy) would
    -- be a LUT's output before every bit of a wide window (the thesis CNN at
    -- 130 multipliers on ECP5: conv_2's 2,304 bits, the critical path).
    window :: Signal dom held
    window = delay (deepErrorX "engine: no window yet")
                   (mux open (load <$> source input) (next <$> window))

    tag :: Signal dom (Tag g)
    tag = bundle (busy, (== 0) <$> chunk, groupEnd, group, lastWord)

    -- Stage 1: the multipliers' operands, registered twice when pipelined: the
    -- first takes the route from the weight memory (ECP5: a block RAM read without
    -- its output register, 5.9 ns, then 6.4 ns to a DSP on jet_hgq's path), the
    -- second becomes the multiplier block's input register (fpga/dspregs.py).
    operandsO = stage (stage (operands <$> group <*> window))
    weightsO  = stage (stage weightsWord)
    tagO      = stageTag (stageTag tag)

    -- Stage 2: the products (and the bias field), registered twice when pipelined:
    -- the first register becomes the multiplier block's own output register (ECP5:
    -- keras2clash's fpga/dspregs.py; iCE40: yosys' ice40_dsp), the second takes the
    -- route from the block to the adder tree on its own, which is long where one tree
    -- sums many blocks (6.7 ns of digits_dense's 11.6 ns critical path on ECP5).
    terms :: Signal dom (Vec p (Vec (ch + 1) (Signed (ChunkBits ch ai wi bi cf))))
    terms = zipWith (chunkTerms @ch @ai @af @wi @wf @bi @bf @cf) <$> operandsO <*> weightsO
    termsP = stage (stage terms)
    tagP   = stageTag (stageTag tagO)

    -- The adder trees, one register per @l@ levels; the tag beside them.
    -- With @b >= 2@ the last level is registered too ('TreeStages'), so the
    -- accumulating adder and its clamp have a cycle of their own.
    (tagT, chunkSums) = adderTree @dom @(TreeLevels ch) levelsPerStage (not onlyChunk) idleTag tagP termsP

    -- The accumulators (contract step 3, "K2C.Filter").
    (validT, firstT, groupEndT, groupT, lastT) = unbundle tagT
    onlyChunk = natToNum @b == (1 :: Integer)
    sums = zipWith <$> (accumulate onlyChunk <$> firstT) <*> accs <*> chunkSums
    accs = delayEn (deepErrorX "engine: no accumulator yet") validT sums

    -- Finish: requantize, then activate, each registered when pipelined.
    -- Pipelined, it reads the accumulator register (which holds the sums of
    -- the previous cycle's step), so the accumulating adder, the requantization
    -- and the activation are a stage each.
    -- A table activation's read is followed by @t@ more registers, the
    -- block RAM's output register and one in the fabric
    -- ('K2C.Activation.Finish').
    Finish requant activate = finish
    requantized = stage (map requant <$> (if pipelined then accs else sums))
    finished = tableStage (stage (map activate <$> requantized))
    groupDone = tableBool (stageBool (stageBool (stageBool (validT .&&. groupEndT))))
    windowDone = tableBool (stageBool (stageBool (stageBool (validT .&&. groupEndT .&&. lastT))))
    -- The finished group's slot, one-hot and registered beside the data: each
    -- result bit is then one multiplexer from registers on its way into the
    -- queue, not an index comparison and a multiplexer (digits_dense on ECP5:
    -- 9.5 ns, from the group index through three LUTs to the queue's LUT RAM).
    groupSel = tableStage (stage (stage (stage (oneHot <$> groupT))))

    -- R collects a window's groups; the last one completes the result,
    -- which enters the queue. The padding results of the last group are
    -- never read, so synthesis removes them. Pipelined with G >= 2, the
    -- queue is written from R itself, the cycle after the last group
    -- completed it (one more cycle in 'PipeDepth'): each finished value then
    -- reaches only its slots of R, and every LUT-RAM cell of the queue is
    -- written from the register beside it, not from the activation's block
    -- RAM through the group multiplexer (mlp_tanh on ECP5: a table's
    -- block-RAM read -> 11.2-11.8 ns of route -> a 512-bit queue's write
    -- data). With G = 1 there is no R (the result is the finished group).
    results   = zipWith3 pick <$> groupSel <*> resultReg <*> (repeat <$> finished)
    resultReg :: Signal dom (Vec g (Vec p o))
    resultReg = delayEn (deepErrorX "engine: no result yet") groupDone results
    (completeAt, completed)
      | pipelined && natToNum @g >= (2 :: Integer) = (register False windowDone, resultReg)
      | otherwise                                  = (windowDone, results)
    complete = mux completeAt (Just . dropPadding <$> completed) (pure Nothing)
    (output, _) = fifo (SNat @(QueueDepth ch l g b t e)) (complete, readyOut)

    stage :: NFDataX a => Signal dom a -> Signal dom a
    stage = if pipelined then delay (deepErrorX "engine: empty stage") else id
    stageBool = if pipelined then register False else id
    tableRegs = if pipelined then natToNum @t else (0 :: Int)
    tableStage :: NFDataX a => Signal dom a -> Signal dom a
    tableStage = case tableRegs of
      0 -> id
      1 -> stage
      _ -> stage . stage
    tableBool = case tableRegs of
      0 -> id
      1 -> stageBool
      _ -> stageBool . stageBool
    stageTag = if pipelined then register idleTag else id
    idleTag = (False, False, False, 0, False)


-- | Which of @n@ slots an index names.
oneHot :: KnownNat n => Index n -> Vec n Bool
oneHot i = map (== i) indicesI

-- | The new value where selected, else the old one.
pick :: Bool -> a -> a -> a
pick selected old new = if selected then new else old

-- | Successor that wraps to 0.
wrap :: KnownNat n => Index n -> Index n
wrap i = if i == maxBound then 0 else i + 1

-- | The window as @b@ chunks of @ch@ values, zero padded at the end (when
-- @k > b * ch@ the values past @b * ch@ would be dropped; 'EngineShape' rules
-- that out).
chunks
  :: forall k b ch a . (KnownNat k, KnownNat b, KnownNat ch, Num a)
  => Vec k a -> Vec b (Vec ch a)
chunks xs = unconcatI (takeI (xs ++ repeat @(b * ch) 0))

-- | The @f@ results in filter order (group 0 first), without the padding
-- filters of the last group.
dropPadding :: forall f p g o . (KnownNat f, f <= (g * p)) => Vec g (Vec p o) -> Vec f o
dropPadding groups = leToPlus @f @(g * p) (takeI (concat groups))
