{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=16 #-}
{-|
The filter engine's datapath ("K2C.Engine"): from each step's operands (a
chunk of the window per PE and the ROM word) to a window's complete result,
@D@ cycles ('PipeDepth') after its last step.

Per step, each of the @p@ PEs multiplies its chunk of @ch@ values with its
filter's @ch@ weights, sums the products and the bias field in an adder tree
and accumulates the sum over the @b@ chunks of the window; after a group's
last chunk the @p@ results are requantized, activated ('K2C.Activation.
Finish') and collected into the result register @R@, and the group that
completes the window sends it to the output queue. The arithmetic and the
exact accumulator contract (saturating order included) are "K2C.Filter"'s.

= Pipeline (@l@ adder levels per stage)

@l = 0@ does a step's products, adder tree, accumulation, requantization and
activation in one cycle (the critical path of the whole design). @l >= 1@
registers, each stage beside a copy of the step's tag ('K2C.EngineControl.
Tag'):

* the multipliers' operands, twice: the first register takes the route from
  the weight memory (ECP5: a block RAM read without its output register,
  5.9 ns, then 6.4 ns to a DSP on jet_hgq's path), the second sits beside the
  multiplier block and becomes its input register (keras2clash's
  fpga/dspregs.py);
* the products (and the bias field), twice: the multiplier block's own output
  register (ECP5: fpga/dspregs.py; iCE40: yosys' ice40_dsp), then one that
  takes the route from the block to the adder tree on its own (6.7 ns of
  digits_dense's 11.6 ns critical path on ECP5);
* the adder tree after every @l@-th of its @TreeLevels ch@ levels, and with
  @b >= 2@ after its last level too, so the accumulating adder and its clamp
  have a cycle of their own ('TreeStages');
* the accumulators (also when @b = 1@), the requantized and the activated
  results, and @t@ more after a table activation's block RAM read;
* with @G >= 2@ groups the result register @R@, from which the queue is
  written.

Registers and timing change; values do not.

= Hardware

* multipliers: @p * ch@; adders: @p@ trees of @ch + 1@ terms and @p@
  accumulator adders with clamps ("K2C.Filter"); @p@ requantizations and
  activations;
* registers: @p@ accumulators (none when @b = 1@), @R@ (@G * p@ results,
  removed by synthesis when @G = 1@; the padding results of the last group
  are never read, so synthesis removes them too), and when pipelined the
  stages above. Data registers have no reset: the valid bits of the tags say
  what they hold.
-}
module K2C.EngineDatapath
  ( PipeDepth
  , TreeStages
  , datapath
  ) where

import Clash.Prelude

import K2C.Activation (Finish (..), TableRegs)
import K2C.EngineControl (Tag, idleTag)
import K2C.Filter (Accumulates, ChunkBits, TreeLevels, accumulate, adderTree, chunkTerms)
import K2C.Memory (Neuron)

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

-- | The datapath of @p@ PEs over chunks of @ch@ values, @b@ chunks per
-- window, @g@ groups of filters, @f@ results: from each step's tag, the PEs'
-- chunks and the ROM word to the complete result of a window ('Just' in one
-- cycle, 'PipeDepth' cycles after the window's last step). @finish@ is
-- applied to each filter's final accumulator (requantize, then activate).
datapath
  :: forall f p b l ch g ai af wi wf bi bf ci cf o t dom
   . ( HiddenClockResetEnable dom
     , KnownNat f, KnownNat p, KnownNat b, KnownNat l, KnownNat ch, KnownNat g, TableRegs t
     , f <= (g * p)
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => Finish t (SFixed ci cf) o
  -> Signal dom (Tag g)
  -> Signal dom (Vec p (Vec ch (SFixed ai af)))
  -> Signal dom (Vec p (Neuron ch (SFixed wi wf) (SFixed bi bf)))
  -> Signal dom (Maybe (Vec f o))
datapath finish tag operands weightsWord = complete
  where
    levelsPerStage = natToNum @l :: Int
    pipelined      = levelsPerStage > 0

    -- The multipliers' operands, registered twice when pipelined.
    operandsO = stage (stage operands)
    weightsO  = stage (stage weightsWord)
    tagO      = stageTag (stageTag tag)

    -- The products (and the bias field), registered twice when pipelined.
    terms :: Signal dom (Vec p (Vec (ch + 1) (Signed (ChunkBits ch ai wi bi cf))))
    terms = zipWith (chunkTerms @ch @ai @af @wi @wf @bi @bf @cf) <$> operandsO <*> weightsO
    termsP = stage (stage terms)
    tagP   = stageTag (stageTag tagO)

    -- The adder trees, one register per @l@ levels; the tag beside them.
    -- With @b >= 2@ the last level is registered too ('TreeStages').
    (tagT, chunkSums) = adderTree @dom @(TreeLevels ch) levelsPerStage (not onlyChunk) idleTag tagP termsP

    -- The accumulators (contract step 3, "K2C.Filter").
    (validT, firstT, groupEndT, groupT, lastT) = unbundle tagT
    onlyChunk = natToNum @b == (1 :: Integer)
    sums = zipWith <$> (accumulate onlyChunk <$> firstT) <*> accs <*> chunkSums
    accs = delayEn (deepErrorX "engine: no accumulator yet") validT sums

    -- Finish: requantize, then activate, each registered when pipelined.
    -- Pipelined, it reads the accumulator register (which holds the sums of
    -- the previous cycle's step), so the accumulating adder, the requantization
    -- and the activation are a stage each. A table activation's read is
    -- followed by @t@ more registers ('K2C.Activation.Finish').
    Finish requant activate = finish
    requantized = stage (map requant <$> (if pipelined then accs else sums))
    finished    = tableStage (stage (map activate <$> requantized))
    groupDone   = tableBool (stageBool (stageBool (stageBool (validT .&&. groupEndT))))
    windowDone  = tableBool (stageBool (stageBool (stageBool (validT .&&. groupEndT .&&. lastT))))
    -- The finished group's slot, one-hot and registered beside the data: each
    -- result bit is then one multiplexer from registers on its way into the
    -- queue, not an index comparison and a multiplexer (digits_dense on ECP5:
    -- 9.5 ns, from the group index through three LUTs to the queue's LUT RAM).
    groupSel = tableStage (stage (stage (stage (oneHot <$> groupT))))

    -- R collects a window's groups; the last one completes the result.
    -- Pipelined with G >= 2, the queue is written from R itself, the cycle
    -- after the last group completed it (one more cycle in 'PipeDepth'): each
    -- finished value then reaches only its slots of R, and every LUT-RAM cell
    -- of the queue is written from the register beside it, not from the
    -- activation's block RAM through the group multiplexer (mlp_tanh on ECP5:
    -- a table's block-RAM read, 11.2-11.8 ns of route, then a 512-bit queue's
    -- write data). With G = 1 there is no R (the result is the finished group).
    results   = zipWith3 pick <$> groupSel <*> resultReg <*> (repeat <$> finished)
    resultReg :: Signal dom (Vec g (Vec p o))
    resultReg = delayEn (deepErrorX "engine: no result yet") groupDone results
    (completeAt, completed)
      | pipelined && natToNum @g >= (2 :: Integer) = (register False windowDone, resultReg)
      | otherwise                                  = (windowDone, results)
    complete = mux completeAt (Just . dropPadding <$> completed) (pure Nothing)

    -- The pipeline registers, wires when @l = 0@. Data registers have no
    -- reset (the tag's valid bits say what they hold); a table activation's
    -- read is followed by @t@ of them.
    stage :: NFDataX a => Signal dom a -> Signal dom a
    stage = if pipelined then delay (deepErrorX "engine: empty stage") else id
    stageBool = if pipelined then register False else id
    stageTag = if pipelined then register idleTag else id
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

-- | Which of @n@ slots an index names.
oneHot :: KnownNat n => Index n -> Vec n Bool
oneHot i = map (== i) indicesI

-- | The new value where selected, else the old one.
pick :: Bool -> a -> a -> a
pick selected old new = if selected then new else old

-- | The @f@ results in filter order (group 0 first), without the padding
-- filters of the last group.
dropPadding :: forall f p g o . (KnownNat f, f <= (g * p)) => Vec g (Vec p o) -> Vec f o
dropPadding groups = leToPlus @f @(g * p) (takeI (concat groups))
